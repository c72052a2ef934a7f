"""tile_gemm: a per-node matrix-vector block as a register-tiled GEMM micro-kernel."""
import numpy as np
import pytest
import tvm

import cortex_tvm as ct

from .irutil import block_names, find_block, loops_around, trace_names

H = 32
K = tvm.tirx.ForKind


def lstm_prefix(rs):
    rs.specialize_leaves()
    rs.pad_levels(3)
    rs.pack("U", axis=0, tile=32)
    rs.dense_index("gates_sum")
    rs.dense_index("gates")
    return rs


def inner_loops(func, block):
    """Loops of `block` inside the level (the level loop dropped)."""
    loops = loops_around(func, block)
    if block_in_level(func, block):
        return loops[1:]
    return loops


def block_in_level(func, block):
    return block in block_names(find_block(func, "level").body)


def fc_prefix(rs):
    rs.specialize_leaves()
    rs.pad_levels(2)
    rs.pack("W", axis=0, tile=16)
    rs.dense_index("child_sum")
    rs.dense_index("internal_h_sum")
    return rs


def test_ir_before_and_after(fresh):
    rs = fc_prefix(fresh("TreeFC"))
    before = inner_loops(rs.func, "internal_h_sum")
    assert [l.kind for l in before] == [K.SERIAL] * 3          # node, column, k
    assert rs.tile_gemm("internal_h_sum", node_tile=2, column_tile=16, lanes=8, k_unroll=8) is rs
    loops = inner_loops(rs.func, "internal_h_sum")
    # r_0, j_0, k_0 | k_1, j_1, r_1_0 (unrolled) | r_1_1 (vectorized)
    assert [l.kind for l in loops] == [K.SERIAL] * 3 + [K.UNROLLED] * 3 + [K.VECTORIZED]
    extents = [l.extent for l in loops]
    assert int(extents[0]) == H // 16                        # column tiles
    assert "// 2" in str(extents[1])                         # whole node tiles of the padded level
    assert int(extents[2]) == H // 8
    assert [int(e) for e in extents[3:]] == [8, 2, 2, 8]      # k_unroll, node_tile, column_tile / lanes, lanes
    # the consumer (tanh(. + b) into h) is computed inside the same tile, vectorized
    consumer = inner_loops(rs.func, "internal_h")
    assert consumer[0].same_as(loops[0]) and consumer[1].same_as(loops[1])
    assert consumer[-1].kind == K.VECTORIZED and int(consumer[-1].extent) == 8
    assert trace_names(rs)[-1] == "tile_gemm"
    assert rs.trace[-1].args == {"block": "internal_h_sum", "node_tile": 2, "column_tile": 16, "lanes": 8,
                                 "k_unroll": 8}
    # the reduction init is split off at build time (finalize), above the first k loop
    assert rs.has_block("internal_h_sum") and not rs.has_block("internal_h_sum_init")
    rs.finalize()
    assert not rs.has_block("internal_h_sum")
    assert rs.has_block("internal_h_sum_init") and rs.has_block("internal_h_sum_update")
    init = inner_loops(rs.func, "internal_h_sum_init")
    assert init[0].same_as(inner_loops(rs.func, "internal_h_sum_update")[0])
    assert [l.kind for l in init[2:]] == [K.UNROLLED, K.UNROLLED, K.VECTORIZED]
    finalized = rs.func
    tvm.ir.assert_structural_equal(rs.finalize().func, finalized)     # idempotent


def test_k_unroll_that_does_not_divide_is_skipped(fresh):
    rs = fc_prefix(fresh("TreeFC")).tile_gemm("internal_h_sum", node_tile=2, column_tile=16, lanes=8,
                                              k_unroll=5)
    loops = inner_loops(rs.func, "internal_h_sum")
    # r_0, j_0, k | j_1, r_1_0 | r_1_1
    assert [l.kind for l in loops] == [K.SERIAL] * 3 + [K.UNROLLED] * 2 + [K.VECTORIZED]
    assert int(loops[2].extent) == H


def test_tree_lstm_gates(fresh):
    """TreeLSTM's gate GEMMs (leaf and internal) tile with a column tile of H."""
    rs = fresh("TreeLSTM").specialize_leaves()
    for block in ("gates_sum", "leaf_gates_sum"):
        rs.dense_index(block)
        rs.tile_gemm(block, node_tile=2, column_tile=32, lanes=16, k_unroll=4)
        loops = loops_around(rs.func, block)
        assert loops[-1].kind == K.VECTORIZED and int(loops[-1].extent) == 16
        assert any(l.kind == K.UNROLLED and int(l.extent) == 2 for l in loops)       # the node tile
        assert any(l.kind == K.UNROLLED and int(l.extent) == 4 for l in loops)       # k_unroll


def test_preconditions(fresh):
    rs = lstm_prefix(fresh("TreeLSTM"))
    for block in ("internal_c", "gates", "internal_h"):
        with pytest.raises(ct.ScheduleError, match=f"{block!r} is not a \\(node, .*reduce...\\) reduction"):
            rs.tile_gemm(block, column_tile=32)
    with pytest.raises(ct.ScheduleError, match="no block named 'nope'"):
        rs.tile_gemm("nope")
    with pytest.raises(ct.ScheduleError, match="column_tile 48 must divide the .* columns of 'gates_sum'"):
        rs.tile_gemm("gates_sum", column_tile=48)
    with pytest.raises(ct.ScheduleError, match="be a multiple of lanes 24"):
        rs.tile_gemm("gates_sum", column_tile=32, lanes=24)
    for knob in ("node_tile", "column_tile", "lanes", "k_unroll"):
        for bad in (0, -1):
            with pytest.raises(ct.ScheduleError, match=f"{knob} must be a positive int"):
                rs.tile_gemm("gates_sum", **{knob: bad})
        with pytest.raises(ct.ScheduleError, match=f"tile_gemm: argument '{knob}' must be int, got float"):
            rs.tile_gemm("gates_sum", **{knob: 2.0})
    assert trace_names(rs)[-1] == "dense_index"
    rs.tile_gemm("gates_sum", column_tile=32)
    with pytest.raises(ct.ScheduleError, match="'gates_sum' is already transformed"):
        rs.tile_gemm("gates_sum", column_tile=32)
    # a block split by hand is already transformed too
    rs = fresh("TreeFC").specialize_leaves()
    rs.split(rs.get_loops(rs.get_sblock("internal_h_sum"))[1], [None, 16])
    with pytest.raises(ct.ScheduleError, match="already transformed"):
        rs.tile_gemm("internal_h_sum", column_tile=32)


def test_same_numbers(check_numbers, batches):
    def lstm(rs):
        lstm_prefix(rs)
        rs.tile_gemm("gates_sum", node_tile=3, column_tile=32, lanes=16, k_unroll=8)

    def fc(rs):
        fc_prefix(rs)
        rs.tile_gemm("internal_h_sum", node_tile=2, column_tile=16, lanes=8, k_unroll=4)

    for name, recipe in (("TreeLSTM", lstm), ("TreeFC", fc)):
        tiled = check_numbers(name, recipe)
        plain = check_numbers(name, lambda rs: rs.specialize_leaves())
        for batch in batches:
            np.testing.assert_allclose(tiled(batch), plain(batch), atol=1e-5, rtol=0)


def test_without_padding_numbers(check_numbers):
    """Without pad_levels the node tile has a bounds check, and the numbers are still right."""
    def recipe(rs):
        rs.specialize_leaves()
        rs.dense_index("gates_sum")
        rs.tile_gemm("gates_sum", node_tile=4, column_tile=32)
    check_numbers("TreeLSTM", recipe)


def test_fusion_never_moves_the_tile_past_a_block_that_reads_it():
    """A consumer merged into the tile moves the tile down to it; a reduction between them that
    reads another consumer of the tile must not end up before the tile (it once did: wrong
    numbers under the default schedule)."""
    import numpy as np
    from cortex_tvm import ra

    class GatedTwoStep(ct.models.base.WordModel):
        def weight_shapes(self):
            H, V = self.hidden_size, self.vocab_size
            return {"emb": (V, H), "U": (3 * H, 2 * H), "Uh": (H, 2 * H)}

        def build_program(self):
            H, V = self.hidden_size, self.vocab_size
            n, child = ra.node(), ra.child
            word = ra.node_input("word", bound=V)
            emb, U, Uh = ra.weight("emb", (V, H)), ra.weight("U", (3 * H, 2 * H)), ra.weight("Uh", (H, 2 * H))
            h = ra.rec_placeholder("h", (H,))
            leaf_h = ra.compute((H,), lambda i: emb[word[n], i], name="leaf_h")
            j, k = ra.reduce_axis(2, "j"), ra.reduce_axis(H, "k")
            gates = ra.compute((3, H), lambda g, i: ra.sigmoid(
                ra.sum(U[g * H + i, j * H + k] * h[child(n, j), k], [j, k])), name="gates")
            x0 = ra.compute((H,), lambda i: gates[1, i] * h[child(n, 0), i], name="x0")
            x1 = ra.compute((H,), lambda i: gates[2, i] * h[child(n, 1), i], name="x1")
            k0, k1 = ra.reduce_axis(H, "k0"), ra.reduce_axis(H, "k1")
            internal_h = ra.compute((H,), lambda i: gates[0, i] * ra.tanh(
                ra.sum(Uh[i, k0] * x0[k0], k0) + ra.sum(Uh[i, H + k1] * x1[k1], k1)), name="internal_h")
            return ra.rec_compute(ra.Tree(2), {h: (leaf_h, internal_h)})

    model = GatedTwoStep(hidden_size=16, vocab_size=30)
    trees = ct.data.random_trees(5, (2, 20), seed=1, vocab_size=30)
    plain = model.compile(schedule="none")(trees)
    np.testing.assert_allclose(model.compile()(trees), plain, atol=1e-5)
