"""The shipped cost model: one XGBoost ranker trained on many (model, size, batch, CPU) points.

Its features are read off each candidate's scheduled program (`program_features`: FLOPs and
vector operations over the batch's levels, the level GEMM's register tile, loads per FMA and
bytes per thread against the caches, parallel structure, padding waste), the machine and the
batch shape; no knob value is a feature, so it can rank configurations of models, sizes and
CPUs it was not trained on.  The tuner starts its search from it and measures its pick right after the default;
`compile(schedule="ranked")` takes its pick among a small candidate set with no measurement
(each candidate's schedule is applied, not built).  Plain `compile()` does not ask it: held
out, its pick is level with the analytic rule (docs/tuning.md).

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
import warnings
from importlib import resources

import numpy as np
import tvm_ffi

from .. import data
from ..data import postorder
from ..schedule import RecSchedule, ScheduleError, derive
from ..target import Machine, cpu_info
from .cost_model import PARAMS, SpaceFeaturizer, spearman
from .features import WorkloadStats
from .program_features import FEATURES, program_vector
from .space import TuningPoint

MODEL_FILE = "cost_model.json"
#: the shipped ranker: shallow trees, few rounds (the held-out report in docs/tuning.md chose
#: them; deeper trees fit the measurement noise of the training groups)
SHIPPED_PARAMS, SHIPPED_ROUNDS = {**PARAMS, "max_depth": 2}, 100
#: `choice` takes the model's pick over the analytic rule's point only when the model ranks it
#: this much higher (a pairwise-ranking score): held out, the pick alone is mostly worse than the rule
#: (7.0-14.1% from each group's best against 5.1-7.1%; on the Zen 5 rows, timed in turn, 1.9-4.6%
#: against 2.3%); guarded by this margin it is within a point of the rule (margins 0-0.25
#: were worse, but with the batch size held out)
MARGIN = 0.5
#: the candidates compile(schedule="ranked") ranks: every combination of these knobs' first few
#: values (the unroll depth is not among them: the features, which read the loops inside a
#: level, do not see it)
CANDIDATE_KNOBS = {"node_tile": 3, "max_column_vectors": 3}


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
    if booster.num_features() != FEATURES:
        warnings.warn(f"the shipped cost model reads {booster.num_features()} features, this version computes "
                      f"{FEATURES}: not used (retrain it: python -m cortex_tvm.tune.pretrained)", stacklevel=2)
        return None
    return booster


def featurizer_for(space, stats):
    """The program featurizer of a space over the derived schedule on a CPU (None for
    hand-written recipes, whose knobs are their features)."""
    if space.recipe.name != "derived" or space.target.kind.name != "llvm":
        return None
    return SpaceFeaturizer(space, stats)


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
    """Shape statistics of a typical batch: the prior the ranking uses when it has not
    seen the user's structures."""
    return WorkloadStats.of(kernel_model, [typical_batch(kernel_model, batch_size)])


def candidates(recipe) -> list:
    """The small set of points the shipped model ranks (first values of the knobs that matter most)."""
    names = list(recipe.knobs)
    choices = [recipe.knobs[k][:CANDIDATE_KNOBS.get(k, 1)] for k in names]
    return [TuningPoint.of(**dict(zip(names, values))) for values in itertools.product(*choices)]


#: (program, target, knob candidates) -> the shipped model's choice: compiling one model again
#: (other weights, another precision) does not apply every candidate's schedule again
_choices: dict = {}


def choice(recipe, kernel_model, target, booster=None, facts=None):
    """The candidate point the shipped model (or `booster`) ranks first (no measurement), or
    None when no model is shipped, the recipe is not the derived one, or the bundled sentences cannot
    spell the model's structures.  Each candidate's schedule is applied (0.1-0.3 s, no build)
    to read its program's features.  facts: the compile's `padding.ProgramFacts` (its CPU and
    GEMMs, else found here)."""
    if recipe.name != "derived":
        return None
    lowered = kernel_model.lower(specialize_leaves=False)
    if booster is not None:              # a caller's own model: ranked afresh, not remembered
        return _rank(recipe, kernel_model, lowered, target, booster, facts)
    if shipped_booster() is None:
        return None
    key = (tvm_ffi.structural_hash(lowered.mod), str(target), repr(sorted(recipe.knobs.items())))
    if key not in _choices:
        _choices[key] = _rank(recipe, kernel_model, lowered, target, shipped_booster(), facts)
    return _choices[key]


def _rank(recipe, kernel_model, lowered, target, booster, facts=None):
    import xgboost as xgb
    try:
        stats = typical_stats(kernel_model)
    except ValueError:       # a model whose structures the bundled sentences cannot spell
        return None
    info = cpu_info(target) if facts is None else facts.info
    machine = Machine.of(target, info=info)
    points, vectors = [], []

    def fresh():
        return RecSchedule(lowered)
    distinct = derive.distinct_points([p.as_dict() for p in candidates(recipe)], fresh, info,
                                      None if facts is None else facts.gemms)
    for point in (TuningPoint.of(**knobs) for knobs in distinct):
        try:
            rs = recipe.with_knobs(**point.as_dict()).apply(fresh())
            rs.finalize()
        except ScheduleError:
            continue
        points.append(point)
        vectors.append(program_vector(rs.func, stats, machine))
    if not points:
        return None
    scores = booster.predict(xgb.DMatrix(np.array(vectors, dtype=np.float32)))
    best = int(np.argmax(scores))
    # the first candidate that applies is the analytic rule's point (candidates keep knob order)
    return points[best] if scores[best] - scores[0] > MARGIN else points[0]


def choose(recipe, kernel_model, target, facts=None):
    """The derived recipe with the knobs the shipped model ranks first (no measurement);
    the recipe unchanged when there is no choice to make (see `choice`; facts: as its)."""
    best = choice(recipe, kernel_model, target, facts=facts)
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
    parser = argparse.ArgumentParser(prog="python -m cortex_tvm.tune.pretrained",
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
