"""Measurements for the shipped cost model: configurations of the derived schedule timed on
many (model, hidden size, CPU, batch size) points, one JSON line each with its features.

    python -m cortex_tvm.bench.cost_data --out runs.jsonl --models treelstm treefc \\
        --hidden 64 150 256 --mcpu native haswell --batch 1 10 64
    python -m cortex_tvm.tune.pretrained runs.jsonl --out tuning/cost_model.json

Rerunning with the same --out skips what is already there.  AVX2 code (`--mcpu haswell`)
runs on an AVX-512 host, so one machine measures both ISAs.
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
            for point in chosen:
                key = f"{name}/{H}/{mcpu}/{B}/{point}"
                if key in done:
                    continue
                start = time.perf_counter()
                result = measurer.measure(space, point)
                row = {"key": key, "group": f"{name}/{H}/{mcpu}/{B}", "knobs": point.to_json(),
                       "default": point == default,
                       "seconds": result.mean if np.isfinite(result.mean) else None, "error": result.error,
                       "features": derived_vector(point.as_dict(), facts, stats)}
                with open(out, "a", encoding="utf-8") as f:
                    f.write(json.dumps(row) + "\n")
                if progress is not None:
                    print(f"cost_data: {key}: {result.mean * 1e3:.3f} ms ({time.perf_counter() - start:.1f} s)",
                          file=progress, flush=True)


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
