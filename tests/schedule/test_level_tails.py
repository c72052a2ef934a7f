"""level_tails: each level runs its whole tiles, then its last `size % t` nodes in a tile of
their own (one copy of every stage per remainder, guarded), with no level padded."""
import re

import numpy as np
import pytest
import tvm
import tvm_ffi

import cortex_tvm as ct
from cortex_tvm import build, level_tails
from cortex_tvm.data import Node, chain_tree
from cortex_tvm.models import reference64
from cortex_tvm.policy.derive import derive
from cortex_tvm.schedule.kernels import BARRIER
from cortex_tvm.target import cpu_info, make_target

import reference as ref

from .conftest import TOL
from .irutil import block_names, find_block, fors, loads, loops_around, trace_names

K = tvm.tirx.ForKind


def node_loop(func, block):
    """The outermost loop of `block`'s nest inside its scope (its node loop before scheduling)."""
    return loops_around(func, block)[-len(find_block(func, block).iter_vars)]


def test_ir_before_and_after(fresh):
    rs = fresh("TreeFC").specialize_leaves()
    before = block_names(rs.func)
    assert not any("_tail" in n for n in before)
    assert isinstance(node_loop(rs.func, "child_sum").extent, tvm.ir.prim.expr.Sub)    # lo[l+1] - lo[l]

    assert rs.level_tails(3) is rs
    func = rs.func
    names = block_names(func)
    for scope in ("leaves", "level"):
        assert f"{scope}_whole" in names and f"{scope}_tail1" in names and f"{scope}_tail2" in names
        assert f"{scope}_tail3" not in names
    for stage in ("child_sum", "internal_h_sum", "internal_h"):
        # the whole tiles: (lo[l + 1] - lo[l]) // 3 * 3 nodes
        e = node_loop(func, stage).extent
        assert isinstance(e, tvm.ir.prim.expr.Mul) and int(e.b) == 3 and int(e.a.b) == 3, e
        assert len(loads(e, "level_offsets")) == 2
        for r in (1, 2):
            # a tail: a constant r nodes, at the level's position after the whole tiles
            loop = node_loop(func, f"{stage}_tail{r}")
            assert isinstance(loop.extent, tvm.tirx.IntImm) and int(loop.extent) == r
    show = rs.show()
    # each tail's block runs only when the level leaves its remainder
    assert "T.where((level_offsets[v_1 + 1] - level_offsets[v_1]) % 3 == 1)" in show
    assert "T.where((level_offsets[v_1 + 1] - level_offsets[v_1]) % 3 == 2)" in show
    # a tail reads its nodes' children after the whole tiles; its scratchpad rows are its own 0..r-1
    assert "level_offsets[v_1] + ((level_offsets[v_1 + 1] - level_offsets[v_1]) // 3 * 3 + v_i0)" in show
    tail_h_sum = find_block(func, "level_tail1").alloc_buffers
    assert [b.name for b in tail_h_sum] == ["child_sum_tail1", "internal_h_sum_tail1"]
    # the runtime pads nothing: the level sizes are the trees'
    assert rs.plan.node_tile == 1 and rs.tail_tile == 3
    assert trace_names(rs) == ["specialize_leaves", "level_tails"]
    # the scheduler sees the copies among the level's blocks
    assert rs.block_names("level") == ["child_sum", "internal_h_sum", "internal_h",
                                       "child_sum_tail1", "internal_h_sum_tail1", "internal_h_tail1",
                                       "child_sum_tail2", "internal_h_sum_tail2", "internal_h_tail2"]


def test_finalize_opens_the_tails_and_joins_their_parallel_stages(fresh):
    rs = fresh("TreeLSTM")
    derive(rs, cpu_info(make_target("llvm")), node_tile=3)
    assert [s for s in rs.trace if s.primitive == "tile_gemm" and "tail" in s.args["block"]] and all(
        s.args["node_tile"] == int(re.search(r"_tail(\d)", s.args["block"]).group(1))
        for s in rs.trace if s.primitive == "tile_gemm" and "tail" in s.args["block"])
    rs.finalize()
    func = rs.func
    names = block_names(func)
    assert not any(level_tails.is_part(s, n) for s in ("leaves", "level") for n in names)
    assert func.attrs[level_tails.SEPARATE_TILES]
    level = find_block(func, "level")
    stages = list(level.body.seq) if isinstance(level.body, tvm.tirx.SeqStmt) else [level.body]
    # the GEMM and its epilogue, whole tiles and both tails: one parallel loop, one fork and join
    parallel = [s for s in stages if isinstance(s, tvm.tirx.For) and s.kind == K.PARALLEL]
    assert len(parallel) == 1
    inside = block_names(parallel[0])
    assert {"gates_sum_update", "gates_sum_tail1_update", "gates_sum_tail2_update"} <= set(inside)
    guards = [s for s in _ifs(parallel[0])]
    assert len(guards) == 2 and all(isinstance(g.condition, tvm.ir.prim.expr.EQ) for g in guards)
    assert {int(g.condition.b) for g in guards} == {1, 2}
    # no block keeps the guard as a predicate
    assert "% 3 == 1)" not in "".join(line for line in rs.script().splitlines() if "T.where" in line)
    # finalize is idempotent
    again = rs.finalize().func
    assert tvm_ffi.structural_equal(again, func)


def _ifs(stmt):
    found = []
    tvm_ffi.structural_walk(stmt, (tvm.tirx.IfThenElse, found.append), order="pre")
    return found


def level_sizes_trees(vocab_size):
    """Batches whose levels leave every remainder of 1..4 against a tile of 5, and none."""
    def full(depth, word=1):
        if depth == 0:
            return Node(word=word % vocab_size)
        return Node(children=[full(depth - 1, 2 * word), full(depth - 1, 2 * word + 1)])
    return [
        [chain_tree(9, seed=1, vocab_size=vocab_size)],                      # levels of one node
        [chain_tree(6, seed=2, vocab_size=vocab_size), full(2), full(3)],    # 1..4 nodes a level
        [full(4)] + [chain_tree(3, seed=s, vocab_size=vocab_size) for s in range(4)],
        [full(3) for _ in range(5)],                                          # 5, 10, 20: whole tiles
    ]


@pytest.mark.parametrize("name,node_tile", [("TreeLSTM", 5), ("TreeFC", 3), ("TreeGRU", 4),
                                            ("ChildSumTreeLSTM", 3), ("MVRNN", 6)])
def test_numbers_every_remainder(name, node_tile, make_model, vocab_size, batches):
    model = make_model(name)
    info = cpu_info(make_target("llvm"))

    def schedule(rs):
        return derive(rs, info, node_tile=node_tile)
    compiled = model.compile(schedule=schedule)
    assert compiled.plan.node_tile == 1
    assert any(s["primitive"] == "level_tails" and s["args"] == {"multiple": node_tile} for s in compiled.trace)
    weights = model.weights
    for batch in level_sizes_trees(vocab_size) + batches[:2]:
        got = compiled(batch)
        want = ref.roots(name, batch, weights) if name in ("TreeFC", "TreeLSTM") else reference64(model, batch)
        err = float(np.max(np.abs(got.astype(np.float64) - want)))
        assert err <= TOL, f"{name}: max abs diff {err:g}"
    if name in ("TreeFC", "TreeLSTM"):         # every node's states, the tails' nodes among them
        batch = level_sizes_trees(vocab_size)[1]
        for got, want in zip(compiled(batch, all_nodes=True), ref.all_h(name, batch, weights)):
            np.testing.assert_allclose(got, want, atol=TOL, rtol=0)


def test_persistent_threads_with_tails(fresh, make_model, vocab_size):
    info = cpu_info(make_target("llvm"))
    if info.cores < 2:
        pytest.skip("persistent_threads needs a parallel stage: one core here")
    rs = fresh("TreeFC")
    derive(rs, info, node_tile=3, persistent_threads=True)
    rs.finalize()
    level = find_block(rs.func, "level")
    stages = list(level.body.seq)
    assert all(isinstance(s, tvm.tirx.For) and s.kind == K.PARALLEL and int(s.annotations[BARRIER]) == 1
               for s in stages)
    model = make_model("TreeFC")
    compiled = model.compile(schedule=lambda rs: derive(rs, info, node_tile=3, persistent_threads=True))
    for batch in level_sizes_trees(vocab_size):
        err = float(np.max(np.abs(compiled(batch) - ref.roots("TreeFC", batch, model.weights))))
        assert err <= TOL


def test_a_parallel_tail_stage_that_cannot_join_forks_only_when_it_runs(fresh):
    """MV-RNN's per-node matrix product runs its node loop in parallel (parallel_nodes): the
    whole tiles' loop spans a data-dependent count, so a tail's copy cannot join it and sits
    under its guard instead, forking no threads on a level without that remainder."""
    info = cpu_info(make_target("llvm"))
    if info.cores < 2:
        pytest.skip("parallel_nodes needs two cores")
    rs = fresh("MVRNN")
    derive(rs, info, node_tile=3)
    rs.finalize()
    level = find_block(rs.func, "level")
    guarded = [s for s in level.body.seq if isinstance(s, tvm.tirx.IfThenElse)]
    assert guarded and all(isinstance(g.then_case, tvm.tirx.For) and g.then_case.kind == K.PARALLEL
                           and isinstance(g.then_case.extent, tvm.tirx.IntImm) for g in guarded)
    assert {int(g.condition.b) for g in guarded} == {1, 2}


def test_preconditions(fresh):
    rs = fresh("TreeFC")
    for bad in (0, -2):
        with pytest.raises(ct.ScheduleError, match="multiple must be a positive int"):
            rs.level_tails(bad)
    with pytest.raises(ct.ScheduleError, match="65 > 64 is not supported"):
        rs.level_tails(65)
    assert not rs.trace
    rs.level_tails(4)
    with pytest.raises(ct.ScheduleError, match=r"already end in tails \(level_tails\(4\)\)"):
        rs.level_tails(2)
    with pytest.raises(ct.ScheduleError, match=r"pad_levels: levels already end in tails"):
        rs.pad_levels(4)
    padded = fresh("TreeFC").pad_levels(3)
    with pytest.raises(ct.ScheduleError, match="level_tails: levels are already padded to 3"):
        padded.level_tails(3)
    # a multiple of 1 is whole tiles only: nothing to copy
    one = fresh("TreeFC").level_tails(1)
    assert not any("_tail" in n for n in block_names(one.func))


def _tile_allocations(model, pipeline):
    """{buffer name: element count} of the kernel's register tiles as they reach LowerTVMBuiltin
    (after StorageRewrite, where the pipeline runs it) when `model`'s derived schedule is built with
    a node tile of 3 (the default's tile depends on the CPU: 5 for TreeLSTM with two FMA units)."""
    target = make_target("llvm")
    rs, _ = build.schedule_model(model, target, lambda rs: derive(rs, cpu_info(target), node_tile=3))
    tiles = {}

    @tvm.instrument.pass_instrument
    class BeforeLowerBuiltin:
        def run_before_pass(self, mod, info):
            if info.name != "tirx.LowerTVMBuiltin":
                return
            def visit(node):
                if node.buffer.name.startswith("gates"):
                    tiles[node.buffer.name] = int(np.prod([int(e) for e in node.buffer.shape])) * node.buffer.dtype.lanes
            tvm_ffi.structural_walk(mod["cortex_main"], (tvm.tirx.AllocBuffer, visit), order="pre")

    with tvm.transform.PassContext(opt_level=3, config=rs.plan.pass_config(), instruments=[BeforeLowerBuiltin()]):
        tvm.compile(rs.module(), target=target, tir_pipeline=pipeline)
    return tiles


def test_tail_tiles_stay_separate_stack_arrays(make_model):
    """Built without StorageRewrite, each tail's tile is its own allocation (one array shared with
    the whole tiles' would keep LLVM from promoting the accumulators to registers).  Whether LLVM
    then promotes a tail's tile entirely depends on the CPU it targets, so the check reads the TIR."""
    model = make_model("TreeLSTM")
    tile = 5 * 16                                        # one node's five gates, one column tile
    ours = _tile_allocations(model, ct.TIR_PIPELINE)
    assert {n: ours.get(n) for n in ("gates_sum", "gates_sum_tail1", "gates_sum_tail2")} == {
        "gates_sum": 3 * tile, "gates_sum_tail1": 1 * tile, "gates_sum_tail2": 2 * tile}, ours
    # TVM's own pipeline (with StorageRewrite) folds the tails' tiles into shared arrays
    plain = _tile_allocations(model, "s_tir")
    assert "gates_sum_tail1" not in plain and "gates_sum_tail2" not in plain, plain


