"""`cortex-tvm tune MODEL --trials N --log PATH [--trees PTBFILE] [--hidden H] [--batch B] [--seconds S]`."""
from __future__ import annotations

MODELS = {"treelstm": "TreeLSTM", "treefc": "TreeFC"}


def register(subparsers) -> None:
    """Add the `tune` subcommand to the CLI's subparsers."""
    p = subparsers.add_parser("tune", help="search a model's schedule knobs; trials go to a JSON-lines log")
    p.add_argument("model", help="treelstm or treefc")
    p.add_argument("--trials", type=int, default=32, help="trials in all (ones already in the log count)")
    p.add_argument("--log", default="tuning.jsonl", help="JSON-lines tuning log (appended to; resumed)")
    p.add_argument("--trees", default=None, help="a PTB-bracket file to time on (default: bundled SST sample)")
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--batch", type=int, default=10)
    p.add_argument("--seconds", type=float, default=None, help="stop after this many seconds")
    p.add_argument("--target", default="llvm")
    p.add_argument("--repeats", type=int, default=5, help="timed runs per batch (the best counts)")
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(run=_run)


def _run(args) -> int:
    import cortex_tvm as ct
    from . import tune

    key = args.model.lower()
    if key not in MODELS:
        raise SystemExit(f"unknown model {args.model!r}; models: {sorted(MODELS)}")
    trees, vocab = ct.data.sst_sample() if args.trees is None else ct.data.load_ptb(args.trees)
    model = getattr(ct.models, MODELS[key])(hidden_size=args.hidden, vocab_size=len(vocab))
    best = tune(model, trials=args.trials, log=args.log, trees=trees, batch_size=args.batch,
                target=args.target, seconds=args.seconds, seed=args.seed, repeats=args.repeats)
    if best is None:
        print("tune: every trial failed; see the errors in the log")
        return 1
    print(f"best: {best}")
    print(f"use it: model.compile(tuning_log={args.log!r})")
    return 0
