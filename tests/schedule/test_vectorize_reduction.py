"""vectorize_reduction: a reduction not against a weight (a child sum, a per-node matrix product)
vectorized over its output units, optionally register-tiled by rows x vectors.  (derive's use
of it with a register tile, MV-RNN's, is in test_derive.py.)"""
import numpy as np
import pytest
import tvm

import cortex_tvm as ct

from .irutil import loops_around

K = tvm.tirx.ForKind


def _specialized(model):
    rs = ct.RecSchedule(model.lower())
    return rs.specialize_leaves()


def test_ir_before_and_after_and_numbers():
    model = ct.models.ChildSumTreeLSTM(32, 50, max_children=3)
    rs = _specialized(model)
    before = loops_around(rs.func, "h_sum")[1:]
    assert [l.kind for l in before] == [K.SERIAL] * 3 and [int(l.extent) for l in before[1:]] == [32, 3]
    rs.vectorize_reduction("h_sum", lanes=16)
    after = loops_around(rs.func, "h_sum")[1:]
    # (node, unit, child) -> (node, unit tile, child, 16 lanes): the child sum adds whole vectors
    assert [l.kind for l in after] == [K.SERIAL, K.SERIAL, K.SERIAL, K.VECTORIZED]
    assert [int(l.extent) for l in after[1:]] == [2, 3, 16]
    trees = ct.data.random_trees(6, (1, 9), seed=2, vocab_size=50)
    nary = [ct.data.Node(children=[t, ct.data.Node(word=1), ct.data.Node(word=2)]) for t in trees]
    np.testing.assert_allclose(rs.build(model)(nary), model.reference(nary), atol=1e-5)


def test_preconditions():
    rs = _specialized(ct.models.ChildSumTreeLSTM(24, 50, max_children=3))
    with pytest.raises(ct.ScheduleError, match="not a multiple of lanes x vectors = 16"):
        rs.vectorize_reduction("h_sum", lanes=16)
    with pytest.raises(ct.ScheduleError, match="not a multiple of lanes x vectors = 16"):
        rs.vectorize_reduction("h_sum", lanes=8, vectors=2)
    with pytest.raises(ct.ScheduleError, match="is not a .* reduction block"):
        rs.vectorize_reduction("internal_h", lanes=8)
    with pytest.raises(ct.ScheduleError, match="lanes, rows and vectors must be positive ints"):
        rs.vectorize_reduction("h_sum", lanes=0)
    # the child sum (node, unit) has no output axis before the units to tile by rows
    with pytest.raises(ct.ScheduleError, match="no output axis before the last .* rows = 2"):
        rs.vectorize_reduction("h_sum", lanes=8, rows=2)
