"""The shipped cost model: one XGBoost ranker trained on many (model, size, batch, CPU) points.

Its features (`features.derived_vector`) come mostly from the program and the CPU (register
tiles, padding waste, FLOPs, sizes), with a few knob values as they are (node tile, k-unroll,
unroll depth, hoisting, parallel columns, persistent threads), so that it can rank
configurations of models, sizes and CPUs it was not trained on.
`compile()` without a tuning log uses it to pick the derived schedule's knobs from a small
candidate set, with no measurement; the tuner starts its search from it.

    python -m cortex_tvm.bench.cost_data --out runs.jsonl --models treelstm treefc \\
        --hidden 64 150 256 --mcpu native haswell      # measure (JSON lines, resumable)
    python -m cortex_tvm.tune.pretrained runs.jsonl ... --out tuning/cost_model.json
"""
from __future__ import annotations

import argparse
import functools
import itertools
import json
import sys
from importlib import resources

import numpy as np

from .. import data
from ..data import postorder
from .cost_model import PARAMS, spearman
from .features import ProgramFacts, WorkloadStats, complete, derived_vector
from .space import TuningPoint

MODEL_FILE = "cost_model.json"
#: the candidates compile() ranks: every combination of these knobs' first few values
CANDIDATE_KNOBS = {"node_tile": 3, "max_column_vectors": 3, "unroll_depth": 2}


@functools.lru_cache(maxsize=1)
def shipped_booster():
    """The shipped xgboost Booster, or None when the package has none."""
    entry = resources.files("cortex_tvm.tuning_logs") / MODEL_FILE
    if not entry.is_file():
        return None
    import xgboost as xgb
    booster = xgb.Booster()
    with resources.as_file(entry) as path:
        booster.load_model(str(path))
    return booster


def facts_for(space) -> ProgramFacts | None:
    """ProgramFacts for a space over the derived schedule (None for hand-written recipes)."""
    if space.recipe.name != "derived" or space.target.kind.name != "llvm":
        return None
    return ProgramFacts.of(space.kernel_model, space.target)


def typical_batch(kernel_model, batch_size: int = 10) -> list:
    """A typical batch of the structure the model reads, built from the bundled SST sentences
    (words folded into its vocabulary): trees, sequences (one child) or grid DAGs."""
    trees, _ = data.sst_sample()
    vocab = getattr(kernel_model, "vocab_bound", None) or 1
    spec = kernel_model.program.spec
    if spec.kind == "dag":
        return [data.grid_dag(4, 4, seed=i, vocab_size=vocab) for i in range(batch_size)]
    folded = [data.fold_words(t, vocab) for t in trees[:batch_size]]
    if spec.max_children == 1:
        return [data.sequence([n.word for n in postorder(t) if n.is_leaf]) for t in folded]
    return folded


def typical_stats(kernel_model, batch_size: int = 10) -> WorkloadStats:
    """Shape statistics of a typical batch: the prior compile() ranks with when it has not
    seen the user's structures."""
    return WorkloadStats.of(kernel_model, [typical_batch(kernel_model, batch_size)])


def candidates(recipe) -> list:
    """The small set of points compile() ranks (first values of the knobs that matter most)."""
    names = list(recipe.knobs)
    choices = [recipe.knobs[k][:CANDIDATE_KNOBS.get(k, 1)] for k in names]
    return [TuningPoint.of(**dict(zip(names, values))) for values in itertools.product(*choices)]


def choice(recipe, kernel_model, target):
    """The candidate point the shipped model ranks first (no measurement), or None when no
    model is shipped, the recipe is not the derived one, or the bundled sentences cannot
    spell the model's structures."""
    booster = shipped_booster()
    if booster is None or recipe.name != "derived":
        return None
    import xgboost as xgb
    facts = ProgramFacts.of(kernel_model, target)
    try:
        stats = typical_stats(kernel_model)
    except ValueError:       # a model whose structures the bundled sentences cannot spell
        return None
    points = candidates(recipe)
    x = np.array([derived_vector(p.as_dict(), facts, stats) for p in points], dtype=np.float32)
    return points[int(np.argmax(booster.predict(xgb.DMatrix(x))))]


def choose(recipe, kernel_model, target):
    """The derived recipe with the knobs the shipped model ranks first (no measurement);
    the recipe unchanged when there is no choice to make (see `choice`)."""
    best = choice(recipe, kernel_model, target)
    return recipe if best is None else recipe.with_knobs(**best.as_dict())


# -- building the shipped model (the measurements come from `python -m cortex_tvm.bench.cost_data`) --
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
    rows = [{**r, "features": complete(r["features"])} for r in rows if r["seconds"]]
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


def train(rows, rounds: int = 200, seed: int = 0):
    """An xgboost pairwise ranker over groups (one group per workload and batch size)."""
    import xgboost as xgb
    groups = sorted({r["group"] for r in rows})
    rows = sorted(rows, key=lambda r: groups.index(r["group"]))
    x = np.array([r["features"] for r in rows], dtype=np.float32)
    y = -np.log(np.array([r["seconds"] for r in rows]))
    data = xgb.DMatrix(x, label=y)
    data.set_group([sum(r["group"] == g for r in rows) for g in groups])
    return xgb.train({**PARAMS, "seed": seed}, data, num_boost_round=rounds)


def held_out_report(rows, by: str = "hidden", out=sys.stdout) -> dict:
    """Leave one value of `by` ("hidden", "model" or "mcpu") out, train on the rest, and report
    on the held-out groups: Spearman of predicted vs measured order, and the regret of the
    top-ranked point against the group's best and against the analytic default.

    `rows` are every measurement (`load_runs(..., drop_disturbed=False)`): the disturbed ones are
    left out of the training side only, since dropping test points by their own times would
    choose the test set by its labels."""
    import xgboost as xgb
    index = {"model": 0, "hidden": 1, "mcpu": 2}[by]
    values = sorted({r["group"].split("/")[index] for r in rows})
    report = {}
    for value in values:
        test = [r for r in rows if r["group"].split("/")[index] == value]
        booster = train(without_disturbed([r for r in rows if r["group"].split("/")[index] != value]))
        rhos, regrets, default_regrets = [], [], []
        for g in sorted({r["group"] for r in test}):
            grp = [r for r in test if r["group"] == g]
            if len(grp) < 3 or not any(r.get("default") for r in grp):
                continue
            pred = booster.predict(xgb.DMatrix(np.array([r["features"] for r in grp], dtype=np.float32)))
            secs = np.array([r["seconds"] for r in grp])
            rhos.append(spearman(pred, -secs))
            regrets.append(secs[int(np.argmax(pred))] / secs.min() - 1)
            default_regrets.append(min(r["seconds"] for r in grp if r.get("default")) / secs.min() - 1)
        report[value] = (float(np.mean(rhos)), float(np.mean(regrets)), float(np.mean(default_regrets)))
        print(f"held out {by}={value}: spearman {report[value][0]:.2f}, model's pick {100 * report[value][1]:.1f}% "
              f"slower than the best, analytic default {100 * report[value][2]:.1f}% slower", file=out)
    return report


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cortex_tvm.tune.pretrained",
                                     description="train the shipped cost model on measurements")
    parser.add_argument("runs", nargs="+", help="JSON lines from python -m cortex_tvm.bench.cost_data")
    parser.add_argument("--out", required=True)
    parser.add_argument("--report", choices=["hidden", "model", "mcpu"], nargs="*",
                        default=["hidden", "model", "mcpu"])
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
