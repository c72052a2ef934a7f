"""bind_nodes: one scope's nodes on CUDA thread blocks, its output units on threads, scratchpads in
shared memory and accumulators in registers.  Checked on the IR: no GPU is needed to schedule for one."""
import pytest
import tvm

import cortex_tvm as ct

from .irutil import bindings, loops_around, trace_names

K = tvm.tirx.ForKind


def test_ir_before_and_after(fresh):
    rs = fresh("TreeFC").specialize_leaves()
    assert bindings(loops_around(rs.func, "internal_h")) == [
        (K.SERIAL, "num_levels_plus_1 - 2", None),                               # the levels
        (K.SERIAL, "level_offsets[v + 1] - level_offsets[v]", None),             # the level's nodes
        (K.SERIAL, "32", None)]                                                  # the hidden units
    leaves = bindings(loops_around(rs.func, "leaf_h"))
    assert rs.bind_nodes("level", threads=16) is rs
    # the node loop gets the host-known bound on blockIdx.x; 32 units on 16 threads, 2 each
    assert bindings(loops_around(rs.func, "internal_h")) == [
        (K.SERIAL, "num_levels_plus_1 - 2", None),
        (K.THREAD_BINDING, "max_level_size", "blockIdx.x"),
        (K.THREAD_BINDING, "16", "threadIdx.x"),
        (K.SERIAL, "2", None)]
    assert bindings(loops_around(rs.func, "leaf_h")) == leaves                   # another scope: untouched
    assert rs.bound_scopes == ["level"]
    assert trace_names(rs) == ["specialize_leaves", "bind_nodes"]
    assert rs.trace[-1].args == {"scope": "level", "threads": 16, "local_accumulators": True}


def test_guard_shared_scratchpads_and_register_accumulators():
    """The node loop gets the host-known bound and a guard; outputs go to threads."""
    model = ct.models.TreeFC(hidden_size=32, vocab_size=50)
    rs = ct.RecSchedule(model.lower(specialize_leaves=False))
    rs.specialize_leaves()
    before = rs.show()
    assert "thread_binding" not in before
    rs.bind_nodes("level", threads=32)
    after = rs.show()
    assert 'T.thread_binding(max_level_size, thread="blockIdx.x")' in after
    assert 'T.thread_binding(32, thread="threadIdx.x")' in after
    assert "T.where(i0_m < level_offsets[v_1 + 1] - level_offsets[v_1])" in after
    assert 'scope="shared"' in after and 'scope="local"' in after


def test_every_scope_and_the_automatic_thread_count(fresh):
    rs = fresh("TreeFC").specialize_leaves()
    for scope in ("leaves", "level", "roots"):
        rs.bind_nodes(scope)                       # threads=0: the output extent, 32
    assert rs.bound_scopes == ["leaves", "level", "roots"]
    for block in ("leaf_h", "internal_h"):
        loops = bindings(loops_around(rs.func, block))
        assert (K.THREAD_BINDING, "32", "threadIdx.x") in loops
        assert [tag for _, _, tag in loops if tag] == ["blockIdx.x", "threadIdx.x"]


def test_preconditions():
    model = ct.models.TreeFC(hidden_size=32, vocab_size=50)
    rs = ct.RecSchedule(model.lower(specialize_leaves=False))
    with pytest.raises(ct.ScheduleError, match="^bind_nodes: no scope 'leaves'"):
        rs.bind_nodes("leaves")                    # leaves exist only after specialize_leaves
    rs.specialize_leaves()
    script = rs.script()
    with pytest.raises(ct.ScheduleError, match="^bind_nodes: scope must be"):
        rs.bind_nodes("nodes")
    with pytest.raises(ct.ScheduleError, match=r"^bind_nodes: threads must be an int in \[0, 1024\]"):
        rs.bind_nodes("level", threads=4096)
    assert rs.script() == script and rs.bound_scopes == []            # refused: nothing changed
    rs.bind_nodes("level")
    with pytest.raises(ct.ScheduleError, match="^bind_nodes: 'level' is already bound"):
        rs.bind_nodes("level")
    with pytest.raises(ct.ScheduleError, match="bind_nodes first"):
        rs.single_kernel()
    assert [s.primitive for s in rs.trace] == ["specialize_leaves", "bind_nodes"]


def test_not_with_persistent_threads(fresh):
    rs = fresh("TreeFC").specialize_leaves().pack("W", axis=0, tile=16)
    rs.tile_gemm("internal_h_sum", node_tile=2, column_tile=16, lanes=8).parallel_columns("W").persistent_threads()
    with pytest.raises(ct.ScheduleError, match=r"^bind_nodes: not with persistent_threads\(\)"):
        rs.bind_nodes("level")
