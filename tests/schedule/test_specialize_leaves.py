"""specialize_leaves: a "leaves" block for level 0, no is-leaf select in the level loop."""
import pytest
import tvm

import cortex_tvm as ct

from .irutil import block_names, calls, find_block, fors, loads, trace_names


def level_binding(func):
    (loop,) = [f for f in fors(func.body) if isinstance(f.body, tvm.s_tir.stmt.SBlockRealize)
               and f.body.block.name_hint == "level"]
    (binding,) = loop.body.iter_values
    return loop, binding


@pytest.mark.parametrize("name, states", [("TreeLSTM", ["h", "c"]), ("TreeFC", ["h"])])
def test_ir_before_and_after(fresh, name, states):
    rs = fresh(name)
    before = rs.func
    names = block_names(before)
    assert "leaves" not in names
    for s in states:
        assert f"{s}_select" in names
    assert len(calls(before, "if_then_else")) == len(states)
    assert "num_children" in [p.name for p in before.params]
    loop, binding = level_binding(before)
    assert binding.same_as(loop.loop_var)           # the loop computes level l, leaves included

    assert rs.specialize_leaves() is rs
    after = rs.func
    names = block_names(after)
    assert names.index("leaves") < names.index("level") < names.index("roots")
    leaves = find_block(after, "leaves")
    leaf_blocks = block_names(leaves.body)
    assert leaf_blocks and all(n.startswith("leaf_") for n in leaf_blocks), leaf_blocks
    assert not [n for n in names if n.endswith("_select")]
    assert not calls(after, "if_then_else")
    assert "num_children" not in [p.name for p in after.params]
    # every node loop in the leaves block covers level 0 only
    for loop in fors(leaves.body):
        for ld in loads(loop.extent, "level_offsets"):
            assert int(ld.indices[0]) in (0, 1)
    # the level loop counts from 0 and computes level l + 1
    loop, binding = level_binding(after)
    assert int(loop.min) == 0
    assert isinstance(binding, tvm.ir.prim.expr.Add) and binding.a.same_as(loop.loop_var) and int(binding.b) == 1
    level = find_block(after, "level")
    assert not [n for n in block_names(level.body) if n.startswith("leaf_")]
    assert rs.lowered.specialized and rs.lowered.first_level == 1
    assert trace_names(rs) == ["specialize_leaves"]
    # the result is the lowering with specialization
    tvm.ir.assert_structural_equal(after, ct.lower.lower(rs.lowered.program, specialize_leaves=True).func)


def test_after_dynamic_batch_is_allowed(fresh):
    rs = fresh("TreeFC").dynamic_batch(False).specialize_leaves()
    assert rs.has_block("leaves") and not rs.plan.dynamic_batching
    assert trace_names(rs) == ["dynamic_batch", "specialize_leaves"]


def test_preconditions(fresh, make_model):
    rs = fresh("TreeFC").specialize_leaves()
    with pytest.raises(ct.ScheduleError, match="already specialized"):
        rs.specialize_leaves()
    with pytest.raises(ct.ScheduleError, match="already specialized"):
        ct.RecSchedule(make_model("TreeFC").lower(specialize_leaves=True)).specialize_leaves()
    # it re-lowers the program, so it must come first
    for prefix in (lambda r: r.fast_math(), lambda r: r.pad_levels(2), lambda r: r.dense_index("child_sum"),
                   lambda r: r.vectorize_block("leaf_h"), lambda r: r.per_level_kernels()):
        rs = fresh("TreeFC")
        prefix(rs)
        with pytest.raises(ct.ScheduleError, match="must come before"):
            rs.specialize_leaves()
        assert not rs.has_block("leaves")
    rs = fresh("TreeFC")
    rs.split(rs.get_loops(rs.get_sblock("child_sum"))[1], [None, 8])
    with pytest.raises(ct.ScheduleError, match=r"must come before \['s_tir.split'\]"):
        rs.specialize_leaves()


@pytest.mark.parametrize("name", ["TreeLSTM", "TreeFC"])
def test_same_numbers(check_numbers, name):
    plain = check_numbers(name, "none")
    assert not plain.lowered.specialized and plain.lowered.uses_num_children
    compiled = check_numbers(name, lambda rs: rs.specialize_leaves())
    assert compiled.lowered.specialized and not compiled.lowered.uses_num_children
