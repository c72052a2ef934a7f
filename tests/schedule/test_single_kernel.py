"""single_kernel: one kernel for the whole inference.  On the CPU (no scope bound) the default
structure, recorded; after bind_nodes on every scope, one persistent CUDA kernel: a fixed grid,
grid-stride loops over each level's nodes and a grid barrier between levels.  Checked on the IR:
no GPU is needed to schedule for one (the CUDA source is tests/gpu/test_cuda_codegen.py's)."""
import pytest
import tvm

import cortex_tvm as ct

from .irutil import bindings, loops_around, trace_names

K = tvm.tirx.ForKind


def all_bound(rs):
    for scope in ("leaves", "level", "roots"):
        rs.bind_nodes(scope)
    return rs


def test_cpu_form_changes_nothing():
    """Without bind_nodes, single_kernel() is the CPU primitive: no IR change."""
    model = ct.models.TreeFC(hidden_size=32, vocab_size=50)
    rs = ct.RecSchedule(model.lower(specialize_leaves=False))
    rs.specialize_leaves()
    before = rs.func.script()
    rs.single_kernel()
    assert rs.func.script() == before and not rs.plan.per_level
    assert rs.show().endswith("# rs.single_kernel(blocks=132)")   # the IR, then the trace (defaults bound)
    assert rs.trace[-1].primitive == "single_kernel" and rs.trace[-1].args == {"blocks": 132}


def test_gpu_form_ir_before_and_after(fresh):
    rs = all_bound(fresh("TreeFC").specialize_leaves())
    assert bindings(loops_around(rs.func, "internal_h")) == [
        (K.SERIAL, "num_levels_plus_1 - 2", None),
        (K.THREAD_BINDING, "max_level_size", "blockIdx.x"),      # one launch per level
        (K.THREAD_BINDING, "32", "threadIdx.x")]
    assert "tirx.kernel_launch_params" not in rs.func.attrs and "grid_sync" not in rs.script()
    assert rs.single_kernel(4) is rs
    # one grid of 4 blocks around the level loop; each level's nodes in a grid-stride loop
    assert bindings(loops_around(rs.func, "internal_h")) == [
        (K.THREAD_BINDING, "4", "blockIdx.x"),
        (K.SERIAL, "num_levels_plus_1 - 2", None),
        (K.SERIAL, "(max_level_size + 3) // 4", None),
        (K.THREAD_BINDING, "32", "threadIdx.x")]
    assert list(rs.func.attrs["tirx.kernel_launch_params"]) == ["blockIdx.x", "threadIdx.x",
                                                                "tirx.use_cooperative_launch"]
    assert rs.script().count("grid_sync") == 2          # after the leaves, and after each level
    assert rs.persistent_blocks == 4 and not rs.plan.per_level
    assert trace_names(rs)[-1] == "single_kernel" and rs.trace[-1].args == {"blocks": 4}


def test_preconditions(fresh):
    rs = fresh("TreeFC").specialize_leaves().bind_nodes("level")
    with pytest.raises(ct.ScheduleError, match=r"^single_kernel: bind_nodes first for \['leaves', 'roots'\]"):
        rs.single_kernel(4)
    rs = all_bound(fresh("TreeFC").specialize_leaves())
    script = rs.script()
    for blocks in (0, -1):
        with pytest.raises(ct.ScheduleError, match=f"^single_kernel: blocks must be a positive int, got {blocks}"):
            rs.single_kernel(blocks)
    assert rs.script() == script and rs.persistent_blocks is None          # refused: nothing changed
    rs.single_kernel(4)
    with pytest.raises(ct.ScheduleError, match="^single_kernel: already a persistent kernel"):
        rs.single_kernel(4)
    per_level = all_bound(fresh("TreeFC").specialize_leaves()).per_level_kernels()
    with pytest.raises(ct.ScheduleError, match=r"^single_kernel: per_level_kernels\(\) was applied"):
        per_level.single_kernel(4)
    assert trace_names(per_level)[-1] == "per_level_kernels"
