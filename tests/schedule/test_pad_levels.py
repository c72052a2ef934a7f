"""pad_levels: level sizes rounded to a multiple, so a split node loop needs no bounds check."""
import numpy as np
import pytest
import tvm

import cortex_tvm as ct

from .irutil import find_block, fors, loads, trace_names


def node_loops(func, scope):
    return [f for f in fors(find_block(func, scope).body) if loads(f.extent, "level_offsets")]


def predicate_of(func, name):
    found = []

    def visit(r):
        if r.block.name_hint == name:
            found.append(r.predicate)
    import tvm_ffi
    tvm_ffi.structural_walk(func, (tvm.s_tir.stmt.SBlockRealize, visit), order="pre")
    (pred,) = found
    return pred


def split_node_loop(rs, block, factor):
    rs.split(rs.get_loops(rs.get_sblock(block))[0], [None, factor])


def test_ir_before_and_after(fresh):
    rs = fresh("TreeFC").specialize_leaves()
    loops = node_loops(rs.func, "level")
    assert len(loops) == 3
    for loop in loops:
        assert isinstance(loop.extent, tvm.ir.prim.expr.Sub)   # lo[l + 1] - lo[l]
    assert rs.pad_levels(3) is rs
    func = rs.func
    for scope in ("leaves", "level"):
        loops = node_loops(func, scope)
        assert loops
        for loop in loops:
            # (lo[l + 1] - lo[l]) // 3 * 3
            e = loop.extent
            assert isinstance(e, tvm.ir.prim.expr.Mul) and int(e.b) == 3, e
            assert isinstance(e.a, tvm.ir.prim.expr.FloorDiv) and int(e.a.b) == 3, e
            assert isinstance(e.a.a, tvm.ir.prim.expr.Sub) and len(loads(e.a.a, "level_offsets")) == 2
    assert "(level_offsets[v_1 + 1] - level_offsets[v_1]) // 3 * 3" in rs.show()
    assert rs.plan.node_tile == 3
    assert trace_names(rs) == ["specialize_leaves", "pad_levels"]


def test_split_needs_no_bounds_check_after_padding(fresh):
    rs = fresh("TreeFC").specialize_leaves()
    split_node_loop(rs, "child_sum", 3)
    assert not isinstance(predicate_of(rs.func, "child_sum"), tvm.tirx.IntImm)   # T.where(j < n)
    rs = fresh("TreeFC").specialize_leaves().pad_levels(3)
    split_node_loop(rs, "child_sum", 3)
    pred = predicate_of(rs.func, "child_sum")
    assert isinstance(pred, tvm.tirx.IntImm) and int(pred) == 1
    assert "T.where" not in rs.show().split('T.sblock("child_sum")')[1].split("T.sblock")[0]


def test_preconditions(fresh):
    rs = fresh("TreeFC")
    for bad in (0, -3):
        with pytest.raises(ct.ScheduleError, match="multiple must be a positive int"):
            rs.pad_levels(bad)
    for bad in (2.5, "3", None, True):
        with pytest.raises(ct.ScheduleError, match="pad_levels: argument 'multiple' must be int"):
            rs.pad_levels(bad)
    with pytest.raises(ct.ScheduleError, match="65 > 64 is not supported"):
        rs.pad_levels(65)
    assert rs.plan.node_tile == 1 and not rs.trace
    rs.pad_levels(4)
    padded = rs.func
    with pytest.raises(ct.ScheduleError, match="already padded to 4"):
        rs.pad_levels(4)
    with pytest.raises(ct.ScheduleError, match="already padded"):
        rs.pad_levels(2)
    tvm.ir.assert_structural_equal(rs.func, padded)


@pytest.mark.parametrize("name, multiple", [("TreeLSTM", 3), ("TreeFC", 4)])
def test_same_numbers(check_numbers, batches, name, multiple):
    def recipe(rs):
        rs.specialize_leaves()
        rs.pad_levels(multiple)
        for block in rs.block_names():
            split_node_loop(rs, block, multiple)
    compiled = check_numbers(name, recipe)
    assert compiled.plan.node_tile == multiple
    for batch in batches:
        lin = compiled.linearize(batch)
        assert np.all(lin.level_sizes % multiple == 0)
