"""dense_index: a scratchpad indexed by node id (non-affine) becomes indexed by position (affine)."""
import numpy as np
import pytest
import tvm

import cortex_tvm as ct
from cortex_tvm.schedule.layout import MIN_DENSE_ROWS

from .irutil import accesses, alloc, find_block, is_level_offset_index, param, reads_index_array, shape, \
    trace_names

H = 32


def node_loop_accesses(func, scope, tensor):
    """Indices of every access of `tensor` inside the stage scope's node loops."""
    found = accesses(find_block(func, scope).body, tensor)
    assert found
    return found


def test_ir_before_and_after(fresh):
    rs = fresh("TreeLSTM").specialize_leaves()
    before = alloc(rs.func, "gates_sum")
    assert isinstance(before.shape[0], tvm.tirx.Var) and before.shape[0].name == "num_slots"
    assert int(np.prod(shape(before)[1:])) == 5 * H        # the gates of one node
    for idx in node_loop_accesses(rs.func, "level", "gates_sum"):
        assert is_level_offset_index(idx[0]), idx
        assert reads_index_array(idx[0])
    other = alloc(rs.func, "gates")

    assert rs.dense_index("gates_sum") is rs
    func = rs.func
    # no index of gates_sum reads level_offsets or children any more: gates_sum[j, r]
    found = node_loop_accesses(func, "level", "gates_sum")
    for idx in found:
        assert not any(reads_index_array(i) for i in idx), idx
        assert isinstance(idx[0], tvm.tirx.Var), idx
    # and the allocation is one level (at least MIN_DENSE_ROWS rows), not every slot
    after = alloc(func, "gates_sum")
    assert MIN_DENSE_ROWS == 64
    tvm.ir.assert_structural_equal(after.shape[0], tvm.tirx.max(param(func, "max_level_size"), 64))
    assert shape(after)[1:] == shape(before)[1:]
    assert "gates_sum = T.sblock_alloc_buffer((T.max(max_level_size, 64), " in rs.show()
    # read/write regions follow
    block = find_block(func, "gates_sum")
    for region in list(block.reads) + list(block.writes):
        if region.source.name == "gates_sum":
            assert not reads_index_array(region.region[0].min)
    # the other scratchpad is untouched
    assert alloc(func, "gates").same_as(other) or shape(alloc(func, "gates")) == shape(other)
    for idx in node_loop_accesses(func, "level", "gates"):
        assert is_level_offset_index(idx[0])
    assert trace_names(rs) == ["specialize_leaves", "dense_index"]
    assert rs.trace[-1].args == {"tensor": "gates_sum"}


def test_leaf_and_unspecialized_scratchpads(fresh):
    rs = fresh("TreeLSTM").specialize_leaves()
    rs.dense_index("leaf_gates")
    for idx in node_loop_accesses(rs.func, "leaves", "leaf_gates"):
        assert not any(reads_index_array(i) for i in idx)
    # in the unspecialized program the two cases' results are scratchpads too
    rs = fresh("TreeFC")
    assert rs.scratchpads() == ["leaf_h", "child_sum", "internal_h_sum", "internal_h"]
    for name in rs.scratchpads():
        rs.dense_index(name)
        for idx in node_loop_accesses(rs.func, "level", name):
            assert not any(reads_index_array(i) for i in idx), (name, idx)
    # the states themselves keep node-id indices
    for idx in node_loop_accesses(rs.func, "level", "h"):
        if len(idx) == 2 and is_level_offset_index(idx[0]):
            break
    else:
        raise AssertionError("h is no longer stored at level_offsets[l] + j")


def test_preconditions(fresh):
    rs = fresh("TreeLSTM").specialize_leaves()
    for bad in ("nope", "h", "U", "level_offsets"):
        with pytest.raises(ct.ScheduleError, match=f"no scratchpad named {bad!r}"):
            rs.dense_index(bad)
    for bad in (3, None):
        with pytest.raises(ct.ScheduleError, match="dense_index: argument 'tensor' must be str"):
            rs.dense_index(bad)
    with pytest.raises(ct.ScheduleError, match="scratchpads are \\['leaf_gates_sum'"):
        rs.dense_index("nope")
    rs.dense_index("gates")
    dense = rs.func
    with pytest.raises(ct.ScheduleError, match="not at level_offsets"):
        rs.dense_index("gates")
    tvm.ir.assert_structural_equal(rs.func, dense)
    assert trace_names(rs) == ["specialize_leaves", "dense_index"]


@pytest.mark.parametrize("name", ["TreeLSTM", "TreeFC"])
def test_same_numbers(check_numbers, batches, name):
    def specialized(rs):
        rs.specialize_leaves()
        for s in rs.scratchpads():
            rs.dense_index(s)
        assert not any("num_slots" in str(alloc(rs.func, s).shape[0]) for s in rs.scratchpads())

    def unspecialized(rs):
        for s in rs.scratchpads():
            rs.dense_index(s)

    a = check_numbers(name, specialized)
    b = check_numbers(name, unspecialized)
    for batch in batches:
        np.testing.assert_allclose(a(batch), b(batch), atol=1e-5, rtol=0)
