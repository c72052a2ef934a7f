"""The `cortex-tvm` command: demo, show (and, as they arrive, bench, tune)."""
from __future__ import annotations

import argparse
import sys
import time

from . import config


def _demo(args) -> int:
    import numpy as np

    import cortex_tvm as ct
    from .timing import batches_of, mean_of_best

    trees, vocab = ct.data.sst_sample() if args.trees is None else ct.data.load_ptb(args.trees)
    print(f"cortex-tvm demo: TreeLSTM H={args.hidden}, {len(trees)} SST trees, batches of {args.batch}, "
          f"TVM_NUM_THREADS={config.load().num_threads}")
    model = ct.models.TreeLSTM(hidden_size=args.hidden, vocab_size=len(vocab))
    start = time.perf_counter()
    compiled = model.compile(target="llvm")
    print(f"compiled in {time.perf_counter() - start:.1f} s (schedule {compiled.recipe_name!r}, "
          f"target {compiled.target})")

    batches = batches_of(trees, args.batch, args.max_batches)
    worst = 0.0
    for batch in batches:                       # correctness on every batch first
        worst = max(worst, float(np.abs(compiled(batch) - model.reference(batch)).max()))
    ours = mean_of_best(compiled, batches, args.repeats)
    baseline = mean_of_best(model.reference, batches, args.repeats)
    lin = mean_of_best(compiled.linearize, batches, args.repeats)
    # the work done at run time: hoisted leaves are table lookups, their FLOPs happened at compile time
    gflop = np.mean([model.runtime_flops(b, bool(compiled.plan.hoisted)) for b in batches]) / 1e9
    print(f"{len(batches)} batches, mean of per-batch best of {args.repeats}:")
    print(f"  cortex_tvm (end to end)      {ours * 1e3:8.3f} ms   {gflop / ours:6.1f} GFLOP/s of run-time work")
    print(f"  numpy, batched by level      {baseline * 1e3:8.3f} ms   -> cortex_tvm is {baseline / ours:.2f}x faster")
    print(f"  linearization share          {lin / ours * 100:8.1f} %    ({lin * 1e6:.0f} us per batch)")
    print(f"  max abs difference vs numpy  {worst:.2e}")
    return 0 if worst < 1e-3 else 1


def _make_model(name, hidden, vocab_size):
    from .bench.cases import MODEL_CLASSES, make_model
    key = name.lower()
    if key not in MODEL_CLASSES:
        raise SystemExit(f"unknown model {name!r}; models: {sorted(MODEL_CLASSES)}")
    return make_model(key, hidden, vocab_size)


def _show(args) -> int:
    """Print the TIR before the recipe and after each of its steps (as a diff, or in full)."""
    import difflib

    from . import build, padding, recipes
    from .schedule import RecSchedule

    target = build.make_target(args.target)
    model = padding.compiled_form(_make_model(args.model, args.hidden, args.vocab), target)

    def fresh():
        return RecSchedule(model.lower(specialize_leaves=False))

    recipe = recipes.resolve(model, target, args.schedule)
    if recipe.knobs:
        recipe = recipe.fitted(fresh)
    if recipe.apply_fn is not None:        # a derived (function) schedule: show the steps it took
        steps = [step.as_json() for step in recipe.apply(fresh()).trace]
        recipe = recipes.Recipe(recipe.name, tuple(steps), knobs={k: [v] for k, v in recipe.knob_values().items()})
    rs = fresh()
    before = rs.show()
    print(f"# {type(model).__name__} H={args.hidden} (kernel H={model.hidden_size}), schedule {recipe.name!r}, "
          f"knobs {recipe.knob_values()}")
    print("# ---- lowered program (before any primitive)")
    print(before)
    for step in recipe.steps_with_knobs():
        done = len(rs.trace)
        recipes.Recipe("step", (step,)).apply(rs)
        label = ", ".join(f"{k}={v!r}" for k, v in step.get("args", {}).items())
        if len(rs.trace) == done:
            print(f"# ---- {step['primitive']}({label}): skipped (optional, does not apply)")
            continue
        after = rs.show()
        print(f"# ---- {step['primitive']}({label})")
        if args.full:
            print(after)
        else:
            diff = difflib.unified_diff(before.splitlines(), after.splitlines(), lineterm="", n=1)
            print("\n".join(list(diff)[2:]) or "# (no change to the TIR: a runtime/build setting)")
        before = after
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="cortex-tvm", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="compile TreeLSTM and run it on the bundled SST trees next to numpy")
    demo.add_argument("--hidden", type=int, default=256)
    demo.add_argument("--batch", type=int, default=10)
    demo.add_argument("--max-batches", type=int, default=None, help="use only the first N batches")
    demo.add_argument("--repeats", type=int, default=5)
    demo.add_argument("--trees", default=None, help="a PTB-bracket file instead of the bundled SST sample")
    demo.set_defaults(run=_demo)
    show = sub.add_parser("show", help="print the TIR after each primitive of a schedule recipe")
    show.add_argument("model", help="a zoo model: treelstm, treefc, treegru, childsum, mvrnn, dagrnn, seqlstm, seqgru")
    show.add_argument("--hidden", type=int, default=64)
    show.add_argument("--vocab", type=int, default=100)
    show.add_argument("--schedule", default=None, help="recipe name or .json path (default: the model's)")
    show.add_argument("--target", default="llvm")
    show.add_argument("--full", action="store_true", help="print the whole TIR after each step, not a diff")
    show.set_defaults(run=_show)
    from .bench import add_parser as _add_bench_parser
    _add_bench_parser(sub)
    from .tune.cli import register as register_tune
    register_tune(sub)
    args = parser.parse_args(argv)
    config.use_all_cores()
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
