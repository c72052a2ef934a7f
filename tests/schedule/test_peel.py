"""peel: the bounds test of a split node loop is taken out of the full tiles by loop partitioning."""
import pytest
import tvm
import tvm_ffi
from tvm.s_tir import transform as st

import cortex_tvm as ct

from .irutil import trace_names


def split_child_sum(rs, factor=4):
    rs.split(rs.get_loops(rs.get_sblock("child_sum"))[0], [None, factor])
    return rs


def build_style_lower(rs):
    """The s_tir lowering passes tvm.compile runs, up to loop partitioning, with the plan's config."""
    seq = tvm.transform.Sequential([
        st.CanonicalizeLoop(), st.LowerInitBlock(), st.PlanAndUpdateBufferAllocationLocation(),
        st.ConvertBlocksToOpaque(), st.CompactBufferAllocation(), st.LowerMatchBuffer(), st.StmtSimplify(),
        st.LowerOpaqueBlock(), tvm.tirx.transform.FlattenBuffer(), st.LoopPartition(),
    ])
    with tvm.transform.PassContext(config=rs.plan.pass_config()):
        return seq(rs.mod)[rs.func_name]


def child_sum_nests(func):
    """The loops over child_sum's node tiles (the split's outer loop `i0_0`), in program order,
    each with the if-conditions inside it."""
    loops = []
    tvm_ffi.structural_walk(func.body, (tvm.tirx.For, loops.append), order="pre")
    out = []
    for loop in loops:
        if loop.loop_var.name != "i0_0":
            continue
        stores, conds = [], []
        tvm_ffi.structural_walk(loop, (tvm.tirx.BufferStore, stores.append))
        assert {st.buffer.name for st in stores} == {"child_sum"}
        tvm_ffi.structural_walk(loop, (tvm.tirx.IfThenElse, lambda i: conds.append(i.condition)))
        out.append((loop, conds))
    return out


def is_true(cond):
    return isinstance(cond, tvm.tirx.IntImm) and int(cond) == 1


def test_ir_before_and_after(fresh):
    rs = split_child_sum(fresh("TreeFC").specialize_leaves())
    assert "T.where(i0_0 * 4 + i0_1 < level_offsets" in rs.show()
    assert not rs.plan.partition_loops and rs.plan.pass_config() == {}
    # without peel every iteration tests the bound
    nests = child_sum_nests(build_style_lower(rs))
    assert len(nests) == 1
    assert nests[0][1] and not all(is_true(c) for c in nests[0][1])

    assert rs.peel("child_sum") is rs
    assert "T.where(T.likely(i0_0 * 4 + i0_1 < level_offsets" in rs.show()
    assert rs.plan.partition_loops
    assert rs.plan.pass_config() == {"s_tir.LoopPartition": {"partition_const_loop": True}}
    assert trace_names(rs) == ["specialize_leaves", "s_tir.split", "peel"]
    func = build_style_lower(rs)
    nests = child_sum_nests(func)
    assert len(nests) == 2, [str(l) for l, _ in nests]
    (main, main_conds), (tail, tail_conds) = nests
    # the main loop runs over the full tiles: no bounds test left in its body
    assert all(is_true(c) for c in main_conds), main_conds
    assert "// 4" in str(main.extent)
    # the last partial tile keeps the test
    assert tail_conds and not all(is_true(c) for c in tail_conds)
    # other blocks are unaffected
    assert "likely" not in rs.show().split('T.sblock("internal_h_sum")')[1]


def test_preconditions(fresh):
    rs = fresh("TreeFC").specialize_leaves()
    with pytest.raises(ct.ScheduleError, match="'child_sum' has no bounds check to peel"):
        rs.peel("child_sum")
    # a split that divides exactly has no bounds check either
    rs.split(rs.get_loops(rs.get_sblock("child_sum"))[1], [None, 8])
    with pytest.raises(ct.ScheduleError, match="split its node loop first"):
        rs.peel("child_sum")
    with pytest.raises(ct.ScheduleError, match="no block named 'nope'"):
        rs.peel("nope")
    assert not rs.plan.partition_loops and trace_names(rs) == ["specialize_leaves", "s_tir.split"]


@pytest.mark.parametrize("name, block", [("TreeFC", "child_sum"), ("TreeLSTM", "internal_c")])
def test_same_numbers(check_numbers, name, block):
    def recipe(rs):
        rs.specialize_leaves()
        rs.split(rs.get_loops(rs.get_sblock(block))[0], [None, 4])
        rs.peel(block)
    compiled = check_numbers(name, recipe)
    assert compiled.plan.partition_loops
