"""Offline training of the shipped cost model, apart from the compile-time chooser (`pretrained`).

This module owns what turns measurements into `tuning/cost_model.json`: reading the cost data
that `python -m cortex_tvm.bench.cost_data` writes (`load_runs`, dropping disturbed points with
`without_disturbed`), training the XGBoost pairwise ranker (`train`, with `SHIPPED_PARAMS` and
`SHIPPED_ROUNDS`), the held-out report that chose them and `pretrained.MARGIN`
(`held_out_report`), and the command line.  Nothing here runs at compile time: `pretrained`
loads the trained file and ranks candidates with it, and imports nothing from this module.

    python -m cortex_tvm.bench.cost_data --out runs.jsonl --models treelstm treefc \\
        --hidden 64 150 256 --mcpu native haswell      # measure (JSON lines, resumable)
    python -m cortex_tvm.tune.train_cost_model runs.jsonl ... --out tuning/cost_model.json

(`python -m cortex_tvm.tune.pretrained ...`, the command's older name, runs the same.)
"""
from __future__ import annotations

import argparse
import json
import sys

import numpy as np

from .cost_model import PARAMS, spearman
from .pretrained import MARGIN
from .program_features import FEATURES

#: the shipped ranker: shallow trees, few rounds (the held-out report in docs/tuning.md chose
#: them; deeper trees fit the measurement noise of the training groups)
SHIPPED_PARAMS, SHIPPED_ROUNDS = {**PARAMS, "max_depth": 2}, 100


#: in cost data recorded before `bench.cost_data` re-timed its outliers, a measurement this many
#: times its group's median was taken while another job held the cores (TVM's spinning thread
#: pool then loses 10-30x): it is dropped, its group kept.  (Dropping
#: whole groups whose slowest point was 3x their fastest threw away exactly the groups where
#: the configuration matters most: large sizes, AVX2, a node tile of 1, 4 lanes.)
DISTURBED = 3.0


def load_runs(paths, drop_disturbed: bool = True) -> list:
    """Measurements from `bench.cost_data`, without failures and (by default) without disturbed
    points; `drop_disturbed=False` keeps them (what a held-out evaluation tests on)."""
    rows = []
    for path in paths:
        with open(path, encoding="utf-8") as f:
            rows += [json.loads(line) for line in f if line.strip()]
    for r in rows:
        if r["seconds"] and r.get("features") is not None and len(r["features"]) != FEATURES:
            raise ValueError(f"cost-data row {r['key']!r} has {len(r['features'])} features; this version has "
                             f"{FEATURES} (python -m cortex_tvm.bench.cost_data --refeature recomputes them)")
    rows = [r for r in rows if r["seconds"] and r.get("features") is not None]
    return without_disturbed(rows) if drop_disturbed else rows


def without_disturbed(rows) -> list:
    """The rows no slower than DISTURBED times their group's median, and every row that
    `bench.cost_data` re-timed (it carries "timings"): its seconds are the median of its
    timings, so what is left slow repeated and is a slow configuration, not a disturbance."""
    by_group = {}
    for r in rows:
        by_group.setdefault(r["group"], []).append(r["seconds"])
    median = {g: float(np.median(times)) for g, times in by_group.items()}
    return [r for r in rows if "timings" in r or r["seconds"] <= DISTURBED * median[r["group"]]]


def train(rows, rounds: int = SHIPPED_ROUNDS, seed: int = 0):
    """An xgboost pairwise ranker over groups (one group per workload and batch size)."""
    import xgboost as xgb
    groups = sorted({r["group"] for r in rows})
    rows = sorted(rows, key=lambda r: groups.index(r["group"]))
    x = np.array([r["features"] for r in rows], dtype=np.float32)
    y = -np.log(np.array([r["seconds"] for r in rows]))
    data = xgb.DMatrix(x, label=y)
    data.set_group([sum(r["group"] == g for r in rows) for g in groups])
    return xgb.train({**SHIPPED_PARAMS, "seed": seed}, data, num_boost_round=rounds)


#: the parts of a cost-data group ("treelstm/256/znver3/10/generated") a report can hold out
GROUP_PARTS = {"model": (0,), "hidden": (1,), "cpu": (2,), "batch": (3,), "trees": (4,), "model+hidden": (0, 1)}


def _part(row, by: str) -> str:
    parts = row["group"].split("/")
    return "/".join(parts[i] for i in GROUP_PARTS[by])


def held_out_report(rows, by: str = "hidden", out=sys.stdout) -> dict:
    """Leave one value of `by` (a GROUP_PARTS name) out, train on the rest, and report
    on the held-out groups: Spearman of predicted vs measured order, and the regret against the
    group's best of the top-ranked point, of what `choice` takes (that point only when it ranks
    MARGIN above the analytic default) and of the analytic default.

    `rows` are every measurement (`load_runs(..., drop_disturbed=False)`): the disturbed ones are
    left out of the training side only, since dropping test points by their own times would
    choose the test set by its labels."""
    import xgboost as xgb
    values = sorted({_part(r, by) for r in rows})
    report = {}
    for value in values:
        test = [r for r in rows if _part(r, by) == value]
        booster = train(without_disturbed([r for r in rows if _part(r, by) != value]))
        rhos, regrets, guarded, default_regrets = [], [], [], []
        for g in sorted({r["group"] for r in test}):
            grp = [r for r in test if r["group"] == g]
            if len(grp) < 3 or not any(r.get("default") for r in grp):
                continue
            pred = booster.predict(xgb.DMatrix(np.array([r["features"] for r in grp], dtype=np.float32)))
            secs = np.array([r["seconds"] for r in grp])
            default = min((i for i, r in enumerate(grp) if r.get("default")), key=lambda i: secs[i])
            pick = int(np.argmax(pred))
            rhos.append(spearman(pred, -secs))
            regrets.append(secs[pick] / secs.min() - 1)
            guarded.append(secs[pick if pred[pick] - pred[default] > MARGIN else default] / secs.min() - 1)
            default_regrets.append(secs[default] / secs.min() - 1)
        if not rhos:
            continue
        report[value] = tuple(float(np.mean(v)) for v in (rhos, regrets, guarded, default_regrets))
        print(f"held out {by}={value}: " + _line(report[value]), file=out)
    if report:
        mean = tuple(float(np.mean([v[i] for v in report.values()])) for i in range(4))
        print(f"held out by {by}, mean of {len(report)}: " + _line(mean), file=out)
    return report


def _line(values) -> str:
    rho, pick, guarded, default = values
    return (f"spearman {rho:.2f}, model's pick {100 * pick:.1f}% slower than the best ({100 * guarded:.1f}% "
            f"with the margin), analytic default {100 * default:.1f}% slower")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cortex_tvm.tune.train_cost_model",
                                     description="train the shipped cost model on measurements")
    parser.add_argument("runs", nargs="+", help="JSON lines from python -m cortex_tvm.bench.cost_data")
    parser.add_argument("--out", required=True)
    parser.add_argument("--report", choices=sorted(GROUP_PARTS), nargs="*",
                        default=["hidden", "model", "cpu", "trees"])
    args = parser.parse_args(argv)
    everything = load_runs(args.runs, drop_disturbed=False)
    for by in args.report:
        held_out_report(everything, by)
    rows = without_disturbed(everything)
    train(rows).save_model(args.out)
    print(f"trained on {len(rows)} measurements of {len({r['group'] for r in rows})} groups -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
