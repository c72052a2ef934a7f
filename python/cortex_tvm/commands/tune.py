"""`cortex-tvm tune MODEL --trials N --log PATH`: search the default schedule's knobs."""
from __future__ import annotations

import sys

from .. import data
from ..tune import tune
from . import UsageError
from .model_arg import model_from_arg


def run(args) -> int:
    """Tune the model on the trees, print the best point and how to use the log; exit status 1
    if every trial failed, 2 on a bad command line."""
    if args.trials < 1:
        print(f"tune: --trials must be at least 1, got {args.trials}", file=sys.stderr)
        return 2
    trees, vocab = data.sst_sample() if args.trees is None else data.load_ptb(args.trees)
    if args.vocab is not None and ":" in args.model:
        raise UsageError(f"--vocab applies to zoo models; {args.model} has its own sizes")
    if args.vocab is not None and args.vocab < 1:
        raise UsageError(f"--vocab must be at least 1, got {args.vocab}")
    model = model_from_arg(args.model, args.hidden, args.vocab or len(vocab))
    target = {"kind": "llvm", "mcpu": args.mcpu} if args.mcpu else args.target
    best = tune(model, trials=args.trials, log=args.log, trees=trees, batch_size=args.batch,
                target=target, seconds=args.seconds, seed=args.seed, repeats=args.repeats,
                precision=args.precision)
    if best is None:
        print("tune: every trial failed; see the errors in the log")
        return 1
    print(f"best: {best}")
    extra = "" if args.precision == "fp32" else f", precision={args.precision!r}"
    print(f"use it: model.compile(tuning_log={args.log!r}{extra})")
    return 0
