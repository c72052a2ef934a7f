"""unroll_levels: `depth` consecutive levels per step of the level loop, guarded past the root."""
import pytest
import tvm
import tvm_ffi

import cortex_tvm as ct

from .irutil import loops_around, trace_names

K = tvm.tirx.ForKind


def level_realize(func):
    found = []
    tvm_ffi.structural_walk(func, (tvm.s_tir.stmt.SBlockRealize,
                                   lambda r: found.append(r) if r.block.name_hint == "level" else None))
    (r,) = found
    return r


@pytest.mark.parametrize("specialize, first", [(True, 1), (False, 0)])
def test_ir_before_and_after(fresh, specialize, first):
    rs = fresh("TreeFC")
    if specialize:
        rs.specialize_leaves()
    (loop,) = loops_around(rs.func, "level")
    assert loop.kind == K.SERIAL
    assert isinstance(level_realize(rs.func).predicate, tvm.tirx.IntImm)
    assert rs.unroll_levels(2) is rs
    outer, inner = loops_around(rs.func, "level")
    assert outer.kind == K.SERIAL and inner.kind == K.UNROLLED and int(inner.extent) == 2
    # ceil((L - first) / 2) steps, each computing levels first + 2 l_0 + l_1
    text = rs.show()
    want_steps = "(num_levels_plus_1 - 1) // 2" if first == 1 else "num_levels_plus_1 // 2"
    assert want_steps in str(outer.extent), outer.extent
    realize = level_realize(rs.func)
    (binding,) = realize.iter_values
    assert "v_0 * 2 + v_1" in str(binding) and (first == 0 or str(binding).endswith("+ 1")), binding
    # a guard skips levels past the root
    assert not isinstance(realize.predicate, tvm.tirx.IntImm)
    assert "T.where(v_0 * 2 + v_1 < num_levels_plus_1 - %d)" % (1 + first) in text
    assert trace_names(rs)[-1] == "unroll_levels" and rs.trace[-1].args == {"depth": 2}


def test_depth_one_changes_nothing(fresh):
    rs = fresh("TreeFC").specialize_leaves()
    before = rs.func
    rs.unroll_levels(1)
    tvm.ir.assert_structural_equal(rs.func, before)
    assert trace_names(rs) == ["specialize_leaves", "unroll_levels"]


def test_preconditions(fresh):
    rs = fresh("TreeFC").specialize_leaves()
    for bad in (0, -2):
        with pytest.raises(ct.ScheduleError, match="depth must be a positive int"):
            rs.unroll_levels(bad)
    for bad in (2.0, "2", None, True):
        with pytest.raises(ct.ScheduleError, match="unroll_levels: argument 'depth' must be int"):
            rs.unroll_levels(bad)
    rs.per_level_kernels()
    with pytest.raises(ct.ScheduleError, match=r"not with per_level_kernels\(\)"):
        rs.unroll_levels(2)
    assert trace_names(rs) == ["specialize_leaves", "per_level_kernels"]


@pytest.mark.parametrize("name", ["TreeLSTM", "TreeFC"])
def test_same_numbers(check_numbers, name):
    check_numbers(name, lambda rs: (rs.specialize_leaves(), rs.unroll_levels(2)))
    check_numbers(name, lambda rs: rs.unroll_levels(3))     # unspecialized: leaves in the loop too


def test_old_traces_of_unroll_recursion_replay_as_unroll_levels(fresh):
    """unroll_recursion was unroll_levels' name before it became CORTEX's recursive unrolling;
    a trace, recipe or tuning log written then (no `chunks` argument) replays as unroll_levels."""
    new = fresh("TreeFC").specialize_leaves().unroll_levels(2)
    replayed = fresh("TreeFC").replay('[{"primitive": "specialize_leaves"}, '
                                      '{"primitive": "unroll_recursion", "args": {"depth": 2}}]')
    tvm.ir.assert_structural_equal(replayed.func, new.func)
    assert trace_names(replayed) == ["specialize_leaves", "unroll_levels"] and replayed.plan.recursion_depth == 1
    with pytest.raises(ct.ScheduleError, match="unroll_levels: argument 'depth'"):
        fresh("TreeFC").replay('[{"primitive": "unroll_recursion", "args": {"depth": "2"}}]')
