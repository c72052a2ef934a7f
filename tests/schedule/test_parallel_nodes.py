"""parallel_nodes: a stage that is not a weight GEMM runs its node loop across cores."""
import numpy as np
import pytest
import tvm

import cortex_tvm as ct
from cortex_tvm.policy.derive import derive
from cortex_tvm.schedule import ScheduleError
from cortex_tvm.target import cpu_info, make_target

from .irutil import loops_around, trace_names

K = tvm.tirx.ForKind


@pytest.fixture(scope="module")
def mvrnn(vocab_size):
    return ct.models.MVRNN(hidden_size=16, vocab_size=vocab_size)


def vectorize(rs):
    return rs.specialize_leaves().vectorize_reduction("internal_A_sum", lanes=8, rows=4, vectors=2)


def vectorized(model):
    return vectorize(ct.RecSchedule(model.lower(specialize_leaves=False)))


def test_ir_before_and_after(mvrnn):
    rs = vectorized(mvrnn)
    before = loops_around(rs.func, "internal_A_sum")
    assert before[0].kind == K.SERIAL and all(l.kind != K.PARALLEL for l in before)
    assert rs.parallel_nodes("internal_A_sum") is rs
    level_loop, node_loop, *inner = loops_around(rs.func, "internal_A_sum")
    assert level_loop.kind == K.SERIAL                                 # levels stay in order
    assert node_loop.kind == K.PARALLEL and "level_offsets" in str(node_loop.extent)
    assert [l.kind for l in inner] == [l.kind for l in before[2:]]      # the register tile is untouched
    # the other stages of the level are not touched
    assert all(l.kind != K.PARALLEL for l in loops_around(rs.func, "internal_A"))
    assert trace_names(rs)[-1] == "parallel_nodes" and rs.trace[-1].args == {"block": "internal_A_sum"}


def test_numbers(mvrnn, sst):
    batch = sst[0][:30]
    want = ct.models.reference64(mvrnn, batch)
    for schedule in (vectorize, lambda rs: vectorize(rs).parallel_nodes("internal_A_sum")):
        np.testing.assert_allclose(mvrnn.compile(schedule=schedule)(batch), want, atol=1e-4)


def test_the_derived_schedule_parallelizes_heavy_stages_only(mvrnn, vocab_size):
    """MV-RNN's per-node matrix product (H x H x 2H per node) gets the cores; a child sum
    (H x children per node) is too small to pay for a fork per level."""
    info = cpu_info(make_target("llvm"))
    rs = derive(ct.RecSchedule(mvrnn.lower(specialize_leaves=False)), info)
    assert "parallel_nodes" in trace_names(rs)
    assert loops_around(rs.func, "internal_A_sum")[1].kind == K.PARALLEL
    child_sum = ct.models.ChildSumTreeLSTM(hidden_size=16, vocab_size=vocab_size, max_children=4)
    rs = derive(ct.RecSchedule(child_sum.lower(specialize_leaves=False)), info)
    assert "parallel_nodes" not in trace_names(rs)


def test_refusals(fresh, mvrnn):
    with pytest.raises(ScheduleError, match="parallel_nodes: no block 'nope' in the level"):
        vectorized(mvrnn).parallel_nodes("nope")
    rs = fresh("TreeFC").specialize_leaves().pack("W", axis=0, tile=16)
    rs.tile_gemm("internal_h_sum", node_tile=2, column_tile=16, lanes=8)
    with pytest.raises(ScheduleError, match="'internal_h_sum' is register-tiled"):
        rs.parallel_nodes("internal_h_sum")
    rs = vectorized(mvrnn)
    outer = rs.sch.get_loops(rs._block("internal_A_sum"))
    rs.sch.reorder(outer[1], outer[0])                                  # a column loop outermost
    with pytest.raises(ScheduleError, match="the outer loop of 'internal_A_sum' is not its node loop"):
        rs.parallel_nodes("internal_A_sum")
