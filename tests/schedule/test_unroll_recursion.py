"""unroll_recursion: CORTEX's recursive unrolling. A node is computed in one step with its
descendants `depth` levels down, on one thread: steps x parallel chunks x phases, and a
linearizer layout that puts each group in one chunk."""
import numpy as np
import pytest
import tvm

import cortex_tvm as ct
from cortex_tvm.data import Node, chain_tree
from cortex_tvm.linearize import check_bounds, linearize
from cortex_tvm.policy import derive
from cortex_tvm.target import cpu_info, make_target

from .irutil import loops_around, trace_names

K = tvm.tirx.ForKind


def test_ir_before_and_after(fresh):
    rs = fresh("TreeFC").specialize_leaves()
    (loop,) = loops_around(rs.func, "level")
    assert loop.kind == K.SERIAL and rs.plan.recursion_depth == 1
    assert rs.unroll_recursion(2, chunks=3) is rs
    step, chunk, phase = loops_around(rs.func, "level")
    assert (step.kind, chunk.kind, phase.kind) == (K.SERIAL, K.PARALLEL, K.SERIAL)
    assert int(chunk.extent) == 3 and int(phase.extent) == 2
    assert str(step.extent) == "(num_levels_plus_1 - 2) // 6", step.extent
    text = rs.script()
    assert "T.axis.opaque(num_levels_plus_1, (step * 3 + chunk) * 2 + phase + 1)" in text, text
    assert (rs.plan.recursion_depth, rs.plan.recursion_chunks, rs.plan.unroll) == (2, 3, (2, 3))
    assert trace_names(rs)[-1] == "unroll_recursion" and rs.trace[-1].args == {"depth": 2, "chunks": 3}


def test_depth_one_changes_nothing(fresh):
    rs = fresh("TreeFC").specialize_leaves()
    before = rs.func
    rs.unroll_recursion(1)
    tvm.ir.assert_structural_equal(rs.func, before)
    assert rs.plan.unroll is None


def test_preconditions(fresh, make_model):
    for bad in (0, -1):
        with pytest.raises(ct.ScheduleError, match="depth must be a positive int"):
            fresh("TreeFC").specialize_leaves().unroll_recursion(bad)
    with pytest.raises(ct.ScheduleError, match="chunks must be a positive int"):
        fresh("TreeFC").specialize_leaves().unroll_recursion(2, chunks=0)
    with pytest.raises(ct.ScheduleError, match=r"specialize_leaves\(\) first"):
        fresh("TreeFC").unroll_recursion(2)
    with pytest.raises(ct.ScheduleError, match="not with per_level_kernels"):
        fresh("TreeFC").specialize_leaves().per_level_kernels().unroll_recursion(2)
    with pytest.raises(ct.ScheduleError, match=r"not with persistent_threads\(\) or unroll_levels"):
        fresh("TreeFC").specialize_leaves().unroll_levels(2).unroll_recursion(2)
    rs = fresh("TreeFC").specialize_leaves().unroll_recursion(2)
    with pytest.raises(ct.ScheduleError, match="applied already"):
        rs.unroll_recursion(2)
    with pytest.raises(ct.ScheduleError, match="not with unroll_recursion"):
        rs.unroll_levels(2)
    with pytest.raises(ct.ScheduleError, match="not with unroll_recursion"):
        rs.persistent_threads()
    assert trace_names(rs) == ["specialize_leaves", "unroll_recursion"]      # the refusals rolled back
    # a stage already parallel: the chunks would nest parallel loops
    info = cpu_info(make_target({"kind": "llvm", "num-cores": 2}))
    def plain():
        return ct.RecSchedule(make_model("TreeLSTM").lower(specialize_leaves=False))
    tiled = derive.derive(plain(), info)
    with pytest.raises(ct.ScheduleError, match="already runs in parallel"):
        tiled.unroll_recursion(2)
    unrolled = derive.derive(plain(), info, recursion_depth=2)
    with pytest.raises(ct.ScheduleError, match="parallel_columns: the chunks of unroll_recursion"):
        unrolled.parallel_columns("U")


@pytest.mark.parametrize("name", ["TreeFC", "TreeLSTM"])
@pytest.mark.parametrize("depth, chunks", [(2, 2), (3, 3), (2, 1)])
def test_same_numbers(check_numbers, name, depth, chunks):
    """Against the float64 reference, on SST slices, a 40-deep chain, single leaves and a unary node."""
    compiled = check_numbers(name, lambda rs: (rs.specialize_leaves(), rs.unroll_recursion(depth, chunks=chunks)))
    assert compiled.plan.unroll == (depth, chunks)


@pytest.fixture(scope="module")
def lstm_pair(make_model):
    """TreeLSTM compiled by the derived schedule as it is and with recursion_depth 2 (register tiles,
    packed weights, hoisted leaves: the whole pipeline)."""
    model = make_model("TreeLSTM")
    info = cpu_info(make_target("llvm"))
    plain = model.compile()
    # the node tile of the analytic point (3 with 32 vector registers, 2 with AVX2's 16)
    return model, plain, model.compile(schedule=lambda rs: derive.derive(
        rs, info, node_tile=plain.plan.node_tile, recursion_depth=2))


def test_derived_schedule_unrolled_equals_reference_on_every_node(lstm_pair, batches):
    model, plain, unrolled = lstm_pair
    assert unrolled.plan.unroll is not None and unrolled.plan.node_tile == plain.plan.node_tile
    for batch in batches:
        np.testing.assert_allclose(unrolled(batch), model.reference(batch), atol=1e-5, rtol=0)
        for got, want in zip(unrolled(batch, all_nodes=True), plain(batch, all_nodes=True)):
            np.testing.assert_allclose(got, want, atol=1e-5, rtol=0)


def test_sequences_unroll(vocab_size):
    model = ct.models.SeqLSTM(hidden_size=16, vocab_size=vocab_size)
    seqs = [ct.data.sequence(list(range(n))) for n in (1, 7, 30)]
    compiled = model.compile(max_unroll_depth=3)
    assert compiled.plan.recursion_depth == 3
    np.testing.assert_allclose(compiled(seqs), ct.models.reference64(model, seqs), atol=1e-5, rtol=0)


def test_a_dag_is_refused_with_the_reason():
    model = ct.models.DAGRNN(hidden_size=8, vocab_size=20)
    compiled = model.compile(max_unroll_depth=2)
    with pytest.raises(ValueError, match="several parents .* cannot be unrolled"):
        compiled([ct.data.grid_dag(3, 3, seed=1, vocab_size=20)])


def test_layout_groups_a_node_with_its_children():
    """The chain root <- a <- b <- c <- leaf: tops root and b; step 1 is c then b, step 2 a then root."""
    leaf = Node(word=1)
    c = Node(children=[leaf])
    b = Node(children=[c])
    a = Node(children=[b])
    root = Node(children=[a])
    lin = linearize([root], 1, unroll=(2, 1))
    assert lin.level_offsets.tolist() == [1, 2, 3, 4, 5, 6]
    assert lin.node_slots.tolist() == [1, 2, 3, 4, 5]        # leaf, c, b, a, root in post-order
    with pytest.raises(ValueError, match=r"unroll must be \(depth, chunks\)"):
        linearize([root], 1, unroll=(2, 0))


def test_layout_keeps_each_group_in_one_chunk_of_one_step(sst):
    trees = sst[0][:40] + [chain_tree(25, seed=2, vocab_size=50)]
    for depth, chunks in ((2, 2), (3, 2), (2, 5)):
        lin = linearize(trees, 2, unroll=(depth, chunks), pad=2)
        check_bounds(lin, 2, node_tile=2, unroll=(depth, chunks))
        per_step = depth * chunks
        assert (lin.num_levels - 1) % per_step == 0
        level = np.repeat(np.arange(lin.num_levels), lin.level_sizes)
        level = np.concatenate([[0], level])
        for slot in range(1, lin.num_slots):
            for child in lin.children[slot]:
                if child == 0 or level[child] == 0:
                    continue
                assert level[child] < level[slot]
                if (level[child] - 1) // per_step == (level[slot] - 1) // per_step:
                    assert (level[child] - 1) // depth == (level[slot] - 1) // depth   # same chunk
        # fewer steps than levels: about a depth-th of the height
        plain = linearize(trees, 2)
        assert (lin.num_levels - 1) // per_step <= -(-(plain.num_levels - 1) // depth) + 1


def test_check_bounds_refuses_a_child_from_another_chunk(sst):
    lin = linearize(sst[0][:10], 2, unroll=(2, 2))
    check_bounds(lin, 2, unroll=(2, 2))
    per_step = 4
    sizes = lin.level_sizes
    # a parent in chunk 1 (phase 1) of step 1 reading a node computed by chunk 0 in that step
    chunk0_phase0, chunk1_phase1 = 1, 1 + 2 + 1
    assert sizes[chunk0_phase0] and sizes[chunk1_phase1]
    children = lin.children.copy()
    parent = lin.level_offsets[chunk1_phase1]
    children[parent, 0] = lin.level_offsets[chunk0_phase0]
    edited = type(lin)(**{**lin.__dict__, "children": children})
    with pytest.raises(ValueError, match="computed in the same step by another chunk"):
        check_bounds(edited, 2, unroll=(2, 2))
    check_bounds(edited, 2)            # a plain kernel has a join between those levels: fine there
    extra = np.append(lin.level_offsets, lin.level_offsets[-1]).astype(np.int32)   # one more, empty level
    ragged = type(lin)(**{**lin.__dict__, "level_offsets": extra})
    with pytest.raises(ValueError, match=f"whole steps of {per_step} levels"):
        check_bounds(ragged, 2, unroll=(2, 2))


def test_run_validates_the_unrolled_layout(lstm_pair, batches):
    _, plain, unrolled = lstm_pair
    with pytest.raises(ValueError, match="another chunk|whole steps"):
        unrolled.run(plain.linearize(batches[0]))      # a plain layout given to the unrolled kernel


def test_max_unroll_depth_and_export(tmp_path, make_model, batches):
    model = make_model("TreeFC")
    compiled = model.compile(max_unroll_depth=2)
    assert compiled.plan.unroll == (2, cpu_info(make_target("llvm")).cores)
    assert "unroll_recursion" in [s["primitive"] for s in compiled.trace]
    loaded = ct.load(compiled.export(tmp_path / "fc"))
    assert loaded.plan.unroll == compiled.plan.unroll
    np.testing.assert_array_equal(loaded(batches[0]), compiled(batches[0]))
