"""`cortex-tvm demo`: compile TreeLSTM and run it on the bundled SST trees next to numpy."""
from __future__ import annotations

import time

import numpy as np

from .. import config, data, models
from ..timing import batches_of, mean_of_best


def run(args) -> int:
    """Check every batch against numpy, then time cortex_tvm, numpy and the linearization;
    exit status 1 if any root differs from numpy's by 1e-3 or more."""
    trees, vocab = data.sst_sample() if args.trees is None else data.load_ptb(args.trees)
    print(f"cortex-tvm demo: TreeLSTM H={args.hidden}, {len(trees)} SST trees, batches of {args.batch}, "
          f"TVM_NUM_THREADS={config.load().num_threads}")
    model = models.TreeLSTM(hidden_size=args.hidden, vocab_size=len(vocab))
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
