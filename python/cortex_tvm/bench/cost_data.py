"""Measurements for the shipped cost model: configurations of the derived schedule timed on
many (model, hidden size, CPU, batch size) points, one JSON line each with its features.

    python -m cortex_tvm.bench.cost_data --out runs.jsonl --models treelstm treefc \\
        --hidden 64 150 256 --mcpu native haswell --batch 1 10 64
    python -m cortex_tvm.tune.pretrained runs.jsonl --out tuning/cost_model.json

Rerunning with the same --out skips what is already there.  AVX2 code (`--mcpu haswell`)
runs on an AVX-512 host, so one machine measures both ISAs.  A point 3x slower than its
group's median is timed again and counts by the median of its timings (`retime_outliers`):
nothing is dropped as "disturbed".
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import time

import numpy as np

from .. import data
from ..target import make_target
from ..tune.features import ProgramFacts, WorkloadStats, derived_vector
from ..tune.measure import Measurer
from ..tune.pretrained import candidates
from ..tune.space import Space, TuningPoint
from .cases import make_model, structures
from .common import batch_starts


def collect(out, models, hidden, mcpus, batch_sizes=(1, 10, 64), points=8, repeats=5, seed=0,
            progress=sys.stderr):
    """Measure `points` configurations of every (model, H, CPU) at every batch size; one JSON
    line per measurement with its features, appended to `out`."""
    done = set()
    if os.path.exists(out):
        with open(out, encoding="utf-8") as f:
            # keyed again from the knobs, so rows written before a knob was renamed still count
            rows = [json.loads(line) for line in f if line.strip()]
            done = {f"{row['group']}/{TuningPoint.from_json(row['knobs'])}" for row in rows}
    trees, vocab = data.sst_sample()
    rng = np.random.default_rng(seed)
    for name, H, mcpu in itertools.product(models, hidden, mcpus):
        target = make_target({"kind": "llvm", "mcpu": mcpu} if mcpu != "native" else "llvm")
        model = make_model(name, H, len(vocab))
        space = Space(model, target)
        facts = ProgramFacts.of(space.kernel_model, target)
        # the default (held_out_report compares against it), compile()'s candidates (the ranking
        # that matters), random points for coverage; timed in a random order, so that a point
        # is not always the first one after a build (a cold first timing would count against it)
        default = space.default()
        pool = [p for p in candidates(space.recipe) if p != default and space.is_valid(p)]
        chosen = [default] + [pool[i] for i in rng.permutation(len(pool))[:points // 2]]
        chosen += space.sample(points - len(chosen), rng, exclude=chosen)
        chosen = [chosen[i] for i in rng.permutation(len(chosen))]
        for B in batch_sizes:
            batches = [structures(name, trees[s:s + B]) for s in batch_starts(len(trees), B, 4)]
            stats = WorkloadStats.of(space.kernel_model, batches)   # padded sizes, as compile() sees them
            measurer = Measurer(model, batches, target, repeats=repeats, warmup=3)
            group = f"{name}/{H}/{mcpu}/{B}"
            todo = [p for p in chosen if f"{group}/{p}" not in done]
            results = {}
            for point in todo:
                start = time.perf_counter()
                results[point] = measurer.measure(space, point)
                if progress is not None:
                    print(f"cost_data: {group}/{point}: {results[point].mean * 1e3:.3f} ms "
                          f"({time.perf_counter() - start:.1f} s)", file=progress, flush=True)
            settled = retime_outliers({p: r.mean for p, r in results.items()},
                                      lambda p: measurer.measure(space, p).mean, progress)
            with open(out, "a", encoding="utf-8") as f:
                for point in todo:
                    seconds, timings = settled[point]
                    row = {"key": f"{group}/{point}", "group": group, "knobs": point.to_json(),
                           "default": point == default,
                           "seconds": seconds if np.isfinite(seconds) else None, "timings": timings,
                           "error": results[point].error,
                           "features": derived_vector(point.as_dict(), facts, stats)}
                    f.write(json.dumps(row) + "\n")


#: a point this many times its group's median is timed again: another job may have held the
#: cores (TVM's spinning thread pool then loses 10-30x), or the configuration is slow
OUTLIER = 3.0
RETIMES = 2


def retime_outliers(seconds: dict, measure, progress=None) -> dict:
    """point -> (seconds, timings).  A point slower than OUTLIER x the group's median is timed
    RETIMES more times and counts by the median of all its timings: a slow configuration
    repeats and is kept as slow; a disturbed measurement does not repeat.  Nothing is dropped."""
    finite = [t for t in seconds.values() if np.isfinite(t)]
    median = float(np.median(finite)) if finite else np.inf
    out = {}
    for point, first in seconds.items():
        timings = [first]
        if np.isfinite(first) and first > OUTLIER * median:
            timings += [measure(point) for _ in range(RETIMES)]
            if progress is not None:
                print(f"cost_data: re-timed an outlier ({first / median:.1f}x the median): "
                      + ", ".join(f"{t * 1e3:.3f}" for t in timings) + f" ms  [{point}]", file=progress, flush=True)
        finite_timings = [t for t in timings if np.isfinite(t)]
        out[point] = (float(np.median(finite_timings)) if finite_timings else np.inf,
                      [float(t) if np.isfinite(t) else None for t in timings])
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cortex_tvm.bench.cost_data", description=__doc__)
    parser.add_argument("--out", required=True)
    parser.add_argument("--models", nargs="+", default=["treelstm", "treefc"])
    parser.add_argument("--hidden", nargs="+", type=int, default=[64, 150, 256])
    parser.add_argument("--mcpu", nargs="+", default=["native", "haswell"])
    parser.add_argument("--batch", nargs="+", type=int, default=[1, 10, 64])
    parser.add_argument("--points", type=int, default=8)
    args = parser.parse_args(argv)
    collect(args.out, args.models, args.hidden, args.mcpu, args.batch, args.points)
    return 0


if __name__ == "__main__":
    sys.exit(main())
