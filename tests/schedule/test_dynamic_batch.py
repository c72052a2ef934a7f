"""dynamic_batch: a linearization policy; the IR is unchanged, only the runtime plan changes."""
import numpy as np
import pytest
import tvm

import cortex_tvm as ct
from cortex_tvm.data import postorder

from .irutil import trace_names


def test_ir_unchanged_plan_changed(fresh):
    rs = fresh("TreeLSTM")
    before = rs.func
    assert rs.plan.dynamic_batching
    assert rs.dynamic_batch(False) is rs
    tvm.ir.assert_structural_equal(rs.func, before)
    assert not rs.plan.dynamic_batching
    rs.dynamic_batch()
    assert rs.plan.dynamic_batching
    assert trace_names(rs) == ["dynamic_batch", "dynamic_batch"]
    assert [s.args for s in rs.trace] == [{"enabled": False}, {"enabled": True}]


@pytest.mark.parametrize("bad", [0, 1, "no", None])
def test_enabled_must_be_bool(fresh, bad):
    rs = fresh("TreeFC")
    with pytest.raises(ct.ScheduleError, match="dynamic_batch: argument 'enabled' must be bool"):
        rs.dynamic_batch(bad)
    assert rs.plan.dynamic_batching and not rs.trace


@pytest.mark.parametrize("name", ["TreeLSTM", "TreeFC"])
def test_same_numbers_one_node_per_step(check_numbers, name, batches):
    compiled = check_numbers(name, lambda rs: (rs.dynamic_batch(False), rs.specialize_leaves()))
    assert not compiled.plan.dynamic_batching
    batch = batches[0]
    lin = compiled.linearize(batch)
    internal = sum(1 for t in batch for n in postorder(t) if not n.is_leaf)
    # every internal node is its own level; the leaves are still one level
    assert lin.num_levels == 1 + internal
    assert np.all(lin.level_sizes[1:] == 1)
    batched = check_numbers(name, lambda rs: rs.specialize_leaves())
    assert batched.linearize(batch).num_levels < lin.num_levels
