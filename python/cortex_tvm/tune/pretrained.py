"""The compile-time chooser: the shipped cost model, one XGBoost ranker trained on many (model,
size, batch, CPU) points, ranks a small candidate set and picks a point (`choice`, `choose`).

Its features are read off each candidate's scheduled program (`program_features`: FLOPs and
vector operations over the batch's levels, the level GEMM's register tile, loads per FMA and
bytes per thread against the caches, parallel structure, padding waste), the machine and the
batch shape; no knob value is a feature, so it can rank configurations of models, sizes and
CPUs it was not trained on.  The tuner starts its search from it and measures its pick right after the default;
`compile(schedule="ranked")` takes its pick among a small candidate set with no measurement
(each candidate's schedule is applied, not built).  Plain `compile()` does not ask it: held
out, its pick is level with the analytic rule (docs/tuning.md).

Training it offline (reading cost data, the held-out report, the command line) is
`train_cost_model`'s; `python -m cortex_tvm.tune.pretrained ...` still runs that command.
"""
from __future__ import annotations

import functools
import itertools
import warnings
from importlib import resources

import numpy as np
import tvm_ffi

from .. import data
from ..data import postorder
from ..policy import derive
from ..schedule import RecSchedule, ScheduleError
from ..target import Machine, cpu_info
from .cost_model import SpaceFeaturizer
from .features import WorkloadStats
from .program_features import FEATURES, program_vector
from .space import TuningPoint

MODEL_FILE = "cost_model.json"
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
    entry = resources.files("cortex_tvm.tuning_data") / MODEL_FILE
    if not entry.is_file():
        return None
    import xgboost as xgb
    booster = xgb.Booster()
    with resources.as_file(entry) as path:
        booster.load_model(str(path))
    if booster.num_features() != FEATURES:
        warnings.warn(f"the shipped cost model reads {booster.num_features()} features, this version computes "
                      f"{FEATURES}: not used (retrain it: python -m cortex_tvm.tune.train_cost_model)", stacklevel=2)
        return None
    return booster


def featurizer_for(space, stats):
    """The program featurizer of a space over the derived schedule on a CPU (None for
    hand-written recipes, whose knobs are their features)."""
    if space.recipe.name != "derived" or space.target.kind.name != "llvm":
        return None
    return SpaceFeaturizer(space, stats)


def typical_batch(padded_model, batch_size: int = 10) -> list:
    """A typical batch of the structure the model reads, built from the bundled SST sentences
    (words folded into its vocabulary): trees, sequences (one child) or grid DAGs."""
    trees, _ = data.sst_sample()
    vocab = getattr(padded_model, "vocab_bound", None) or 1
    spec = padded_model.program.spec
    if spec.kind == "dag":
        return [data.grid_dag(4, 4, seed=i, vocab_size=vocab) for i in range(batch_size)]
    folded = [data.fold_words(t, vocab) for t in trees[:batch_size]]
    if spec.max_children == 1:
        return [data.sequence([n.word for n in postorder(t) if n.is_leaf]) for t in folded]
    return folded


def typical_stats(padded_model, batch_size: int = 10) -> WorkloadStats:
    """Shape statistics of a typical batch: the prior the ranking uses when it has not
    seen the user's structures."""
    return WorkloadStats.of(padded_model, [typical_batch(padded_model, batch_size)])


def candidates(recipe) -> list:
    """The small set of points the shipped model ranks (first values of the knobs that matter most)."""
    names = list(recipe.knobs)
    choices = [recipe.knobs[k][:CANDIDATE_KNOBS.get(k, 1)] for k in names]
    return [TuningPoint.of(**dict(zip(names, values))) for values in itertools.product(*choices)]


#: (program, target, knob candidates) -> the shipped model's choice: compiling one model again
#: (other weights, another precision) does not apply every candidate's schedule again
_choices: dict = {}


def choice(recipe, padded_model, target, booster=None, facts=None):
    """The candidate point the shipped model (or `booster`) ranks first (no measurement), or
    None when no model is shipped, the recipe is not the derived one, or the bundled sentences cannot
    spell the model's structures.  Each candidate's schedule is applied (0.1-0.3 s, no build)
    to read its program's features.  facts: the compile's `padding.ProgramFacts` (its CPU and
    GEMMs, else found here)."""
    if recipe.name != "derived":
        return None
    lowered = padded_model.lower(specialize_leaves=False)
    if booster is not None:              # a caller's own model: ranked afresh, not remembered
        return _rank(recipe, padded_model, lowered, target, booster, facts)
    if shipped_booster() is None:
        return None
    key = (tvm_ffi.structural_hash(lowered.mod), str(target), repr(sorted(recipe.knobs.items())))
    if key not in _choices:
        _choices[key] = _rank(recipe, padded_model, lowered, target, shipped_booster(), facts)
    return _choices[key]


def _rank(recipe, padded_model, lowered, target, booster, facts=None):
    import xgboost as xgb
    try:
        stats = typical_stats(padded_model)
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


def choose(recipe, padded_model, target, facts=None):
    """The derived recipe with the knobs the shipped model ranks first (no measurement);
    the recipe unchanged when there is no choice to make (see `choice`; facts: as its)."""
    best = choice(recipe, padded_model, target, facts=facts)
    return recipe if best is None else recipe.with_knobs(**best.as_dict())


if __name__ == "__main__":
    # the training command's older name: run `train_cost_model` as the script it is (by name, not
    # imported: the training module imports this one, and this one imports nothing of it)
    import runpy
    runpy.run_module("cortex_tvm.tune.train_cost_model", run_name="__main__", alter_sys=True)
