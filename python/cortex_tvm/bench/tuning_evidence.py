"""Does the tuner work?  A benchmark that prints (not a test): `python -m cortex_tvm.bench.tuning_evidence`.

1. Exhaustive: every valid point of a small TreeFC space is built and timed.
2. Search quality: the tuner, given 25% of that many trials, runs for 5 seeds
   against the exhaustive table (its "measurements" are looked up, so seeds
   differ only in the search); the median gap to the exhaustive best is reported.
3. Cost model: Spearman rank correlation on held-out points (train on half, 5 splits).
4. Tuned vs default recipe for TreeLSTM H=256, SST, batch 10, from the shipped log,
   timed alternately in several rounds (best per batch over rounds).
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

from .. import data, models
from ..tune.apply import recipe_from_log
from ..tune.cost_model import CostModel, spearman
from ..tune.database import Database
from ..tune.features import WorkloadStats
from ..tune.measure import MeasureResult, Measurer, tuning_batches
from ..tune.search import SearchConfig, search
from ..tune.space import Space, TuningPoint
from ..tune.workload import Workload
from .common import alternate

#: the hand-written TreeFC recipe's knobs, every one fixed or listed (a knob left out would keep
#: all its candidates and multiply the space): 3 x 3 x 3 x 2 x 2 = 108 points
SMALL_KNOBS = {"column_tile": [64, 32, 16], "node_tile": [1, 2, 4], "k_unroll": [8, 4, 1],
               "unroll_depth": [1, 3], "parallel_columns": [True, False], "per_level": [False], "lanes": [16],
               "specialize": [True]}


class TableMeasurer:
    """Looks up latencies measured earlier instead of building (for simulating search runs)."""

    target = "table"

    def __init__(self, table: dict):
        self.table = table

    def measure(self, space, point):
        return self.table.get(point) or MeasureResult(error="not in the table")


def exhaustive(model, space, measurer, passes=2, out=sys.stdout) -> dict:
    """Every valid point, measured in `passes` sweeps (builds are cached after the first);
    each batch keeps its best time over the sweeps, which filters out other jobs' interference."""

    start = time.perf_counter()
    points = space.valid_points()
    print(f"[1] exhaustive: {len(points)} valid of {space.size} points "
          f"(pruned {space.size - len(points)} in {time.perf_counter() - start:.0f} s), {passes} sweeps",
          file=out, flush=True)
    table = {}
    for sweep in range(passes):
        for point in points:
            r = measurer.measure(space, point)
            old = table.get(point)
            if old is not None and old.error is None and r.error is None:
                r = MeasureResult(tuple(map(min, old.latencies, r.latencies)), None, old.build_s)
            table[point] = r if old is None or old.error is None else old
        print(f"    sweep {sweep + 1}: {time.perf_counter() - start:.0f} s", file=out, flush=True)
    means = sorted(r.mean for r in table.values())
    failed = sum(r.error is not None for r in table.values())
    print(f"    {failed} failed; latency best {means[0] * 1e3:.4f} ms, median {means[len(means) // 2] * 1e3:.4f} ms, "
          f"worst finite {max(m for m in means if np.isfinite(m)) * 1e3:.4f} ms", file=out)
    return table


def save_table(table, path):
    import json
    with open(path, "w", encoding="utf-8") as f:
        json.dump([{"knobs": p.to_json(), "latencies": list(r.latencies), "error": r.error}
                   for p, r in table.items()], f)


def load_table(path) -> dict:
    import json

    with open(path, encoding="utf-8") as f:
        return {TuningPoint.from_json(d["knobs"]): MeasureResult(tuple(d["latencies"]), d["error"])
                for d in json.load(f)}


def search_quality(space, table, stats, seeds=5, fraction=0.25, out=sys.stdout) -> float:

    best = min(r.mean for r in table.values())
    trials = max(4, round(fraction * len(table)))
    gaps = []
    for seed in range(seeds):
        workload = Workload("sim", 0, 0, 0, "table", seed)
        found = search(space, TableMeasurer(table), Database(), workload, stats,
                       SearchConfig(trials=trials, seed=seed), log=None)
        gaps.append(found.mean / best - 1)
    ranks = sorted(r.mean for r in table.values())
    print(f"[2] search: {trials} trials ({fraction:.0%} of {len(table)}), seeds 0..{seeds - 1}: gaps to the "
          f"exhaustive best {best * 1e3:.4f} ms = {', '.join(f'{g:.1%}' for g in gaps)}; "
          f"median {np.median(gaps):.1%} (target <= 5%)", file=out)
    random_gap = np.mean([min(np.random.default_rng(s).choice(ranks, trials, replace=False)) / best - 1
                          for s in range(200)])
    print(f"    (random search with the same trials: mean gap {random_gap:.1%})", file=out)
    return float(np.median(gaps))


def rank_quality(table, stats, splits=5, out=sys.stdout) -> float:

    points = [p for p, r in table.items() if r.error is None]
    scores = []
    for seed in range(splits):
        order = np.random.default_rng(seed).permutation(len(points))
        train, test = order[: len(order) // 2], order[len(order) // 2:]
        model = CostModel(stats, seed=seed).update([points[i] for i in train], [table[points[i]].mean for i in train])
        predicted = model.predict([points[i] for i in test])
        scores.append(spearman(-predicted, [table[points[i]].mean for i in test]))
    print(f"[3] cost model: Spearman on held-out half, {splits} splits: "
          f"{', '.join(f'{s:.2f}' for s in scores)}; mean {np.mean(scores):.2f} (target >= 0.7)", file=out)
    return float(np.mean(scores))


def tuned_vs_default(trees, vocab, log, rounds=3, out=sys.stdout):


    model = models.TreeLSTM(hidden_size=256, vocab_size=len(vocab))
    recipe, how = recipe_from_log(model, log, "llvm", batch_size=10)
    tuned, default = model.compile(schedule=recipe), model.compile()
    batches = tuning_batches(model, trees, 10, max_batches=32)
    seconds = alternate({"default": default, "tuned": tuned}, batches, rounds, 5)
    t, d = seconds["tuned"], seconds["default"]
    print(f"[4] TreeLSTM H=256, SST, batch 10 ({len(batches)} batches, best of {rounds}x5 each, "
          f"record: {how}):\n    default recipe {d * 1e3:.3f} ms  [{Space(model).default()}]"
          f"\n    tuned          {t * 1e3:.3f} ms  [{TuningPoint.of(**recipe.knob_values())}]"
          f"\n    speedup {d / t:.2f}x", file=out)
    return d / t


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cortex_tvm.bench.tuning_evidence", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hidden", type=int, default=128, help="TreeFC hidden size of the exhaustive space")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--batches", type=int, default=8)
    parser.add_argument("--passes", type=int, default=2, help="sweeps over the exhaustive space")
    parser.add_argument("--table", default=None, help="JSON file: reuse this exhaustive table, or save it there")
    parser.add_argument("--log", default="shipped", help="log for [4] (default: the shipped logs)")
    parser.add_argument("--skip-default", action="store_true", help="leave out [4]")
    args = parser.parse_args(argv)
    os.environ.setdefault("TVM_NUM_THREADS", "2")



    trees, vocab = data.sst_sample()
    model = models.TreeFC(hidden_size=args.hidden, vocab_size=len(vocab))
    batches = tuning_batches(model, trees, 10, args.batches)
    print(f"cortex_tvm.tune evidence: TVM_NUM_THREADS={os.environ['TVM_NUM_THREADS']}, TreeFC H={args.hidden}, "
          f"SST batch 10, {len(batches)} batches, best of {args.repeats}", flush=True)
    space = Space(model, recipe="treefc_llvm", knobs=SMALL_KNOBS)
    stats = WorkloadStats.of(model, batches)
    if args.table and os.path.exists(args.table):
        table = load_table(args.table)
        print(f"[1] exhaustive: {len(table)} points loaded from {args.table}")
    else:
        table = exhaustive(model, space, Measurer(model, batches, repeats=args.repeats), args.passes)
        if args.table:
            save_table(table, args.table)
    for point in table:
        space._checked[point] = None
    search_quality(space, table, stats)
    rank_quality(table, stats)
    if not args.skip_default:
        tuned_vs_default(trees, vocab, args.log)
    return 0


if __name__ == "__main__":
    sys.exit(main())
