"""The knob space: pruning by schedule application, sampling, TuningPoint as JSON."""
import dataclasses
import json

import numpy as np
import pytest

import tvm

import cortex_tvm as ct
from cortex_tvm.tune import Database, Space, TuningPoint, TuningRecord, Workload
from cortex_tvm.tune.features import WorkloadStats
from cortex_tvm.tune.cost_model import SpaceFeaturizer

KNOBS = {"column_tile": [32, 16], "node_tile": [1, 2], "k_unroll": [4], "unroll_depth": [1, 2],
         "parallel_columns": [True], "per_level": [False, True], "lanes": [16], "specialize": [True]}


def test_invalid_combination_raises_and_is_pruned(fc32):
    space = Space(fc32, recipe="treefc_llvm", knobs=KNOBS)
    bad = TuningPoint.of(column_tile=32, node_tile=1, k_unroll=4, unroll_depth=2, parallel_columns=True,
                         per_level=True)
    with pytest.raises(ct.ScheduleError, match="per_level_kernels"):
        space.recipe_for(bad).apply(ct.RecSchedule(fc32.lower(specialize_leaves=False)))
    assert "per_level_kernels" in space.check(bad)
    valid = space.valid_points()
    assert space.size == 16
    assert bad not in valid
    # per_level with unroll depth 2 is the one rule this subspace breaks: 4 of 16 pruned
    assert len(valid) == 12
    assert all(not (p.as_dict()["per_level"] and p.as_dict()["unroll_depth"] > 1) for p in valid)


def test_tile_that_does_not_divide_is_pruned():
    model = ct.models.TreeFC(hidden_size=48, vocab_size=10)
    space = Space(model, recipe="treefc_llvm",
                  knobs={**KNOBS, "column_tile": [32], "per_level": [False], "unroll_depth": [1]})
    assert space.valid_points() == []


def test_sample_is_valid_distinct_and_excludes(fc32):
    space = Space(fc32, recipe="treefc_llvm", knobs=KNOBS)
    rng = np.random.default_rng(0)
    first = space.sample(4, rng)
    more = space.sample(20, rng, exclude=first)
    assert len(set(first)) == 4 and all(space.is_valid(p) for p in first + more)
    assert not set(first) & set(more)
    assert len(first) + len(more) == 12          # the whole valid space, nothing twice


def test_unknown_knob_is_an_error(fc32):
    with pytest.raises(ValueError, match="no knobs"):
        Space(fc32, knobs={"warp_size": [32]})


def test_default_point_is_the_recipes(fc32):
    default = Space(fc32).default()
    derived = ct.recipes.resolve(fc32, ct.make_target("llvm"), None)
    assert derived.name == "derived" and default.as_dict() == derived.knob_values()
    hand = Space(fc32, recipe="treefc_llvm").default()
    assert hand.as_dict()["column_tile"] == 32          # 64 does not fit H=32: the next candidate


def test_tuning_point_json_round_trip():
    p = TuningPoint.of(column_tile=64, hoist_budget_mb=0.001, parallel_columns=False, per_level=True)
    assert TuningPoint.from_json(p.to_json()) == p
    assert TuningPoint.from_json(json.dumps(p.to_json())) == p
    assert hash(TuningPoint.from_json(json.loads(json.dumps(p.to_json())))) == hash(p)
    with pytest.raises(ValueError):
        TuningPoint.from_json("[1, 2]")
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.knobs = ()                               # frozen


OLD_PRIMITIVES = {"parallel_columns": "persist", "unroll_levels": "unroll_recursion"}


def test_records_with_the_old_knob_name_still_load(fc32, tmp_path):
    """The knob `persist` is now `parallel_columns`: a log written before still matches the space,
    and its trace (naming the primitives persist and unroll_recursion) replays as the new ones."""
    space = Space(fc32, recipe="treefc_llvm", knobs=KNOBS)
    point = next(p for p in space.points() if space.is_valid(p))
    assert point.as_dict()["parallel_columns"] is True
    rs = space.recipe_for(point).apply(ct.RecSchedule(fc32.lower(specialize_leaves=False)))
    line = TuningRecord(Workload.of(fc32), point, (1e-3,), trace=tuple(json.loads(rs.trace_json()))).to_json()
    line["knobs"] = {("persist" if k == "parallel_columns" else k): v for k, v in line["knobs"].items()}
    line["trace"] = [{**s, "primitive": OLD_PRIMITIVES.get(s["primitive"], s["primitive"])} for s in line["trace"]]
    assert {"persist", "unroll_recursion"} <= {s["primitive"] for s in line["trace"]}
    path = tmp_path / "old.jsonl"
    path.write_text(json.dumps(line) + "\n")
    (record,) = Database(path).records
    assert record.point == point and space.contains(record.point) and space.is_valid(record.point)
    replayed = ct.RecSchedule(fc32.lower(specialize_leaves=False)).replay(list(record.trace))
    tvm.ir.assert_structural_equal(replayed.func, rs.func)
    assert replayed.trace_json() == rs.trace_json()


def test_old_knob_name_gives_the_same_program_features(fc32):
    space = Space(fc32, "llvm")
    stats = WorkloadStats(32, 32, 10, 50.0, 8.0, 6.0, 10.0, 3.0, leaves=26.0, internal_levels=(10, 6, 4, 2, 1, 1))
    featurize = SpaceFeaturizer(space, stats)
    knobs = {k: v for k, v in space.default().as_dict().items() if k != "parallel_columns"}
    vectors = []
    for parallel in (True, False):
        old = TuningPoint.from_json(json.dumps({**knobs, "persist": parallel}))
        assert old == TuningPoint.of(**knobs, parallel_columns=parallel)
        (vector,) = featurize([old])
        np.testing.assert_array_equal(vector, featurize([TuningPoint.of(**knobs, parallel_columns=parallel)])[0])
        vectors.append(vector)
    assert not np.array_equal(*vectors)          # and the knob changes the program
