"""single_kernel / per_level_kernels: one kernel for the whole inference, or one call per level."""
import numpy as np
import pytest
import tvm

import cortex_tvm as ct
from cortex_tvm.schedule import split_per_level
from cortex_tvm.schedule.kernels import LEAVES_FUNC, LEVEL_FUNC, ROOTS_FUNC

from .irutil import block_names, fors, trace_names


def test_plan_changes_ir_does_not(fresh):
    rs = fresh("TreeFC").specialize_leaves()
    before = rs.func
    assert not rs.plan.per_level
    assert rs.per_level_kernels() is rs
    assert rs.plan.per_level
    tvm.ir.assert_structural_equal(rs.func, before)
    assert rs.single_kernel() is rs
    assert not rs.plan.per_level
    tvm.ir.assert_structural_equal(rs.func, before)
    assert trace_names(rs) == ["specialize_leaves", "per_level_kernels", "single_kernel"]


@pytest.mark.parametrize("specialize", [True, False])
def test_split_per_level(fresh, specialize):
    rs = fresh("TreeFC")
    if specialize:
        rs.specialize_leaves()
    mod = split_per_level(rs.func, rs.lowered.first_level)
    assert {g.name_hint for g in mod.get_global_vars()} == {LEAVES_FUNC, LEVEL_FUNC, ROOTS_FUNC}
    main_params = [p.name for p in rs.func.params]
    for name in (LEAVES_FUNC, ROOTS_FUNC):
        assert [p.name for p in mod[name].params] == main_params
        assert mod[name].attrs["global_symbol"] == name
    level = mod[LEVEL_FUNC]
    assert [p.name for p in level.params] == main_params + ["level"]
    # no level loop any more: the level block computes the `level` parameter
    assert not [f for f in fors(level.body) if "level" in block_names(f.body)]
    assert "level" in block_names(level.body)
    assert "roots" in block_names(mod[ROOTS_FUNC].body) and "roots" not in block_names(level.body)
    leaves = block_names(mod[LEAVES_FUNC].body)
    assert ("leaves" in leaves) == specialize
    assert "T.axis.opaque(num_levels_plus_1, level" in level.script()


def test_preconditions(fresh):
    rs = fresh("TreeFC").specialize_leaves().unroll_levels(2)
    with pytest.raises(ct.ScheduleError, match=r"not with unroll_levels\(depth > 1\)"):
        rs.per_level_kernels()
    assert not rs.plan.per_level
    fresh("TreeFC").unroll_levels(1).per_level_kernels()      # depth 1 is no unrolling


@pytest.mark.parametrize("name", ["TreeLSTM", "TreeFC"])
def test_same_numbers(check_numbers, batches, name):
    per_level = check_numbers(name, lambda rs: (rs.specialize_leaves(), rs.per_level_kernels()))
    assert per_level.plan.per_level
    assert len(per_level._functions) == 3 and all(callable(k) for k in per_level._functions)
    single = check_numbers(name, lambda rs: (rs.specialize_leaves(), rs.per_level_kernels(), rs.single_kernel()))
    assert not single.plan.per_level and len(single._functions) == 1
    for batch in batches:
        np.testing.assert_allclose(per_level(batch), single(batch), atol=1e-6, rtol=0)
    # unspecialized: the level kernel computes the leaves as level 0
    plain = check_numbers(name, lambda rs: rs.per_level_kernels())
    assert plain.lowered.first_level == 0
