"""persistent_threads: the level loop is one parallel region of the CPU threads, a barrier ends
each stage of a level, and scratchpads shared by stages are allocated once, outside it."""
import numpy as np
import pytest
import tvm

import cortex_tvm as ct
from cortex_tvm.policy.derive import derive
from cortex_tvm.schedule import ScheduleError, persistent_region
from cortex_tvm.schedule.kernels import BARRIER, LAUNCH_POINT
from cortex_tvm.target import cpu_info, make_target

from .irutil import find_block, loops_around, trace_names

K = tvm.tirx.ForKind


def tree_fc_columns(rs):
    """TreeFC with its GEMM's column tiles parallel and its child sum a serial stage."""
    rs.specialize_leaves().pack("W", axis=0, tile=16)
    rs.tile_gemm("internal_h_sum", node_tile=2, column_tile=16, lanes=8)
    return rs.parallel_columns("W")


def level_stages(func):
    level = find_block(func, "level")
    return list(level.body.seq) if isinstance(level.body, tvm.tirx.SeqStmt) else [level.body]


def test_ir_before_and_after(fresh):
    rs = tree_fc_columns(fresh("TreeFC"))
    (level_loop,) = loops_around(rs.func, "level")
    assert LAUNCH_POINT not in level_loop.annotations
    stages = level_stages(rs.func)
    assert [s.kind for s in stages] == [K.SERIAL, K.PARALLEL]            # child sum, then the GEMM tiles
    assert all(BARRIER not in s.annotations for s in stages)
    level = find_block(rs.func, "level")
    assert "child_sum" in [b.name for b in level.alloc_buffers]

    assert rs.persistent_threads() is rs
    (level_loop,) = loops_around(rs.func, "level")
    assert level_loop.kind == K.SERIAL and int(level_loop.annotations[LAUNCH_POINT]) == 1
    stages = level_stages(rs.func)
    assert [s.kind for s in stages] == [K.PARALLEL, K.PARALLEL]
    assert all(int(s.annotations[BARRIER]) == 1 for s in stages)
    # the GEMM's column-tile loop is the one parallel_columns made: the same tiles, the same extent
    assert int(stages[1].extent) == 32 // 16
    # child_sum is written by one stage and read by the next, on other threads: one copy, at the root
    level = find_block(rs.func, "level")
    root = rs.func.body.block
    assert "child_sum" not in [b.name for b in level.alloc_buffers]
    assert "child_sum" in [b.name for b in root.alloc_buffers]
    assert "child_sum" in [w.source.name for w in level.writes]
    # a scratchpad used by one stage only stays there (each thread its own tile of it)
    assert "internal_h_sum" in [b.name for b in level.alloc_buffers]
    assert trace_names(rs)[-1] == "persistent_threads" and rs.trace[-1].args == {}


def test_idempotent_and_reapplied_at_finalize(fresh):
    rs = tree_fc_columns(fresh("TreeFC")).persistent_threads()
    once = rs.func
    tvm.ir.assert_structural_equal(persistent_region(once), once)
    rs.finalize()
    assert sum(LAUNCH_POINT in l.annotations for l in loops_around(rs.func, "level")) == 1
    assert all(BARRIER in s.annotations for s in level_stages(rs.func))


def test_with_unroll_levels_the_region_spans_the_outer_loop(fresh, check_numbers):
    def schedule(rs):
        tree_fc_columns(rs).unroll_levels(2)
        return rs.persistent_threads()
    rs = schedule(fresh("TreeFC"))
    outer, inner = loops_around(rs.func, "level")
    assert LAUNCH_POINT in outer.annotations and LAUNCH_POINT not in inner.annotations
    check_numbers("TreeFC", schedule)


@pytest.mark.parametrize("name", ["TreeFC", "TreeLSTM"])
def test_numbers_and_one_region_for_the_levels(name, check_numbers, make_model):
    """The derived schedule with and without it: same numbers; the kernel calls the barrier and
    launches fewer parallel regions (one for the leaves' tables, one for every level)."""
    info = cpu_info(make_target("llvm"))
    forked = check_numbers(name, lambda rs: derive(rs, info))
    persistent = check_numbers(name, lambda rs: derive(rs, info, persistent_threads=True))
    assert "persistent_threads" in [s["primitive"] for s in persistent.trace]
    before, after = forked.inspect_source(), persistent.inspect_source()
    assert "TVMBackendParallelBarrier" not in before and "TVMBackendParallelBarrier" in after


ZOO = {"MVRNN": {}, "ChildSumTreeLSTM": {"max_children": 4}, "TreeGRU": {}, "SeqLSTM": {}, "DAGRNN": {}}


@pytest.mark.parametrize("name", sorted(ZOO))
def test_every_structure_of_the_zoo(name, sst, vocab_size):
    """Trees, a child-sum tree, sequences and DAGs (a node with two parents computed once):
    several stages per level, serial ones made parallel, equal to the float64 reference."""
    model = getattr(ct.models, name)(hidden_size=32, vocab_size=vocab_size, **ZOO[name])
    info = cpu_info(make_target("llvm"))
    compiled = model.compile(schedule=lambda rs: derive(rs, info, persistent_threads=True))
    trees = sst[0]
    if name == "DAGRNN":
        batch = [ct.data.grid_dag(3 + i % 3, 4, seed=i, vocab_size=vocab_size) for i in range(6)]
    elif name == "SeqLSTM":
        batch = [ct.data.sequence([n.word for n in ct.data.postorder(t) if n.is_leaf]) for t in trees[:12]]
    else:
        batch = [t for t in trees[:60] if all(len(n.children or ()) <= 4 for n in ct.data.postorder(t))][:20]
    want = ct.models.reference64(model, batch)
    np.testing.assert_allclose(compiled(batch), want, atol=1e-4)
    assert "TVMBackendParallelBarrier" in compiled.inspect_source()


def test_refusals(fresh):
    with pytest.raises(ScheduleError, match="persistent_threads: no stage of a level runs in parallel"):
        fresh("TreeFC").specialize_leaves().persistent_threads()
    with pytest.raises(ScheduleError, match="persistent_threads: not with per_level_kernels"):
        tree_fc_columns(fresh("TreeFC")).per_level_kernels().persistent_threads()
    rs = tree_fc_columns(fresh("TreeFC")).persistent_threads()
    before = rs.func
    with pytest.raises(ScheduleError, match="per_level_kernels: not with persistent_threads"):
        rs.per_level_kernels()
    with pytest.raises(ScheduleError, match="unroll_levels: apply it before persistent_threads"):
        rs.unroll_levels(2)
    tvm.ir.assert_structural_equal(rs.func, before)      # a refused primitive changes nothing
    rs.unroll_levels(1)                                  # depth 1 changes nothing: allowed
    gpu = fresh("TreeFC").specialize_leaves().bind_nodes("level")
    with pytest.raises(ScheduleError, match="persistent_threads: a CPU primitive"):
        gpu.persistent_threads()
    with pytest.raises(ScheduleError, match="bind_nodes: not with persistent_threads"):
        tree_fc_columns(fresh("TreeFC")).persistent_threads().bind_nodes("level")


def test_a_stage_that_reduces_over_its_outer_loop_is_refused(vocab_size):
    """A reduction whose outer loop is the reduction axis cannot be shared among threads."""
    model = ct.models.ChildSumTreeLSTM(hidden_size=32, vocab_size=vocab_size, max_children=4)
    rs = derive(ct.RecSchedule(model.lower(specialize_leaves=False)), cpu_info(make_target("llvm")))
    node, _, over_children = rs.sch.get_loops(rs._block("h_sum"))[:3]    # (node, column, child)
    rs.sch.reorder(over_children, node)
    with pytest.raises(ScheduleError, match="stage 'h_sum' reduces over its outer loop"):
        rs.persistent_threads()
