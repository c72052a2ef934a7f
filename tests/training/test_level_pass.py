"""The backward compiled (`adjoint_kernel`: the recomputation and the level pass): the IR it
emits, and the same gradients as the numpy backward for every zoo model.

The numpy pass (`Adjoint` without a target) is itself checked against central differences and
PyTorch (test_gradients.py, test_torch_training.py); here the two are compared on the same
states and adjoints, with an adjoint on every state of every node (all of a node's states seed
the pass, not only the roots' first), on each model's own structures: SST trees, sequences,
grid DAGs whose nodes have two parents (the serial function).
"""
import gc
import re

import numpy as np
import pytest
import tvm

import cortex_tvm as ct
from cortex_tvm import adjoint_kernel, adjoint_pass, lower, ra
from cortex_tvm.adjoint import Adjoint
from cortex_tvm.adjoint_copies import Transposed, Widened
from cortex_tvm.adjoint_emit import Unsupported
from cortex_tvm.stage_numpy import StageNumpy, loads
from cortex_tvm.target import make_target

from .ir_text import after_transposes
from .numpy_twin import (assert_forward_then_both_pullbacks, assert_same_gradients, numpy_gradients,
                         random_adjoints, zoo_case)

H = 6


@pytest.mark.parametrize("name", sorted(ct.models.BY_NAME))
def test_compiled_level_pass_equals_numpy(name, sst):
    _check_against_numpy(name, H, sst, 6)


def test_columns_past_whole_vectors_and_levels_past_whole_tiles(sst):
    """H = 20: whole vectors, then a vector of the 4 columns past them (AVX-512 and AVX2 alike);
    40 trees: levels of every size mod 8, so whole node tiles and each rest tile run."""
    lin = _check_against_numpy("treelstm", 20, sst, 40)
    sizes = np.diff(lin.level_offsets)
    rests = {int(s) % 8 for s in sizes}
    assert all(any(r & tile for r in rests) for tile in (4, 2, 1)) and sizes.max() > 8, sizes


@pytest.mark.parametrize("name", ["treelstm", "dagrnn"])
def test_the_pass_zeroes_what_it_adds_into(name, sst):
    """The compiled levels zero their own adjoint rows, and the caller zeroes no working array:
    with every kept array poisoned (NaN) between two calls, the gradients are still the numpy
    pass's (TreeLSTM: trees, the parallel function; DAG-RNN: shared nodes, the serial one)."""
    _check_against_numpy(name, H, sst, 6, poison=True)


def _check_against_numpy(name, hidden, sst, count, poison=False):
    model, lin, states, d_states, compiled = zoo_case(name, hidden, sst, count, 1)
    got = compiled.vjp(lin, states, model.weights, [d.copy() for d in d_states])
    if poison:
        kept = [a for stage in compiled._held.stages.values() for a in stage.values()]
        kept += list(compiled.level_pass._arrays.by_param.values())
        assert len(kept) > 10
        for array in kept:
            array.fill(np.nan)
        got = compiled.vjp(lin, states, model.weights, [d.copy() for d in d_states])
    assert_same_gradients(got, numpy_gradients(model, lin, states, d_states))
    children = lin.children[lin.children != 0]
    shared = np.bincount(children).max() > 1
    assert compiled.level_pass.last_run == ("all", "serial" if shared else "parallel")
    return lin


def _tree_fc_pass(parallel=True):
    model = ct.models.TreeFC(hidden_size=16, vocab_size=20)
    stages = {n: lower.build_stage(model.program, n) for n in ("leaf", "internal")}
    numpy_stages = {n: StageNumpy(s) for n, s in stages.items()}
    return adjoint_kernel.level_pass(stages, numpy_stages, model.program, lanes=8, parallel=parallel, cores=3)


def test_the_passes_that_compute_values_transpose_the_weights_themselves():
    """The values' computation reads TreeFC's W (16 x 16) transposed, one vector per load: the
    "all" and "forward" parts write W_T from W first, in a parallel loop over tiles of 16 rows
    of W, into one panel (1, 16, 16) (the host copies nothing: the array is the function's own
    scratch); "backward", which computes no value, neither writes nor reads it."""
    model = ct.models.TreeFC(hidden_size=16, vocab_size=20)
    stages = {n: lower.build_stage(model.program, n) for n in ("leaf", "internal")}
    numpy_stages = {n: StageNumpy(s) for n, s in stages.items()}
    # (a tile's source row r = v_7 outside its columns c = v_8: each row of W read along its columns)
    transpose = "W_T[(v_5 * 16 + v_7) // 16, v_6 * 16 + v_8, (v_5 * 16 + v_7) % 16] = W[v_5 * 16 + v_7, v_6 * 16 + v_8]"
    for part in ("all", "forward", "backward"):
        func, params = adjoint_kernel.level_pass(stages, numpy_stages, model.program, lanes=8, parallel=True,
                                                 cores=3, part=part)
        text = func.script()
        assert (text.count(transpose) == 1) == (part != "backward"), part
        assert ("W_T[" in text) == (part != "backward"), part
        if part != "backward":
            head, rest = text.split(transpose)
            assert head.endswith("    for v_5 in T.parallel(1):\n        for v_6, v_7, v_8 in T.grid(1, 16, 16):\n"
                                 "            ") and "W_T[" not in head
            assert "W_T[" in rest                                   # read after it, by the values
        assert [p[1].name for p in params if p[0] == "transposed"] == ["W"]      # every part takes it


def test_a_transpose_lays_each_block_of_columns_out_in_panels_of_a_line():
    """TreeLSTM h = 6 reads U (5h, 2h) as U[g * h + i, j * h + k] for gates_sum[n, g, i]: its
    transpose is (5, 2h, 16), gate g's 6 columns in panel g (a 64-byte line a row, the rows one
    after the other), which the transposing loop writes and the tiles read (the pad columns are
    never read: the poisoned pool above holds NaN there); W (3h, x), read as W[g * h + i, e],
    likewise.  A GPU build, whose host transposes, keeps the plain (2h, 5h)."""
    model = ct.models.TreeLSTM(hidden_size=6, embed_size=5, vocab_size=20)
    stages = {n: lower.build_stage(model.program, n) for n in ("leaf", "internal")}
    numpy_stages = {n: StageNumpy(s) for n, s in stages.items()}
    func, params = adjoint_kernel.level_pass(stages, numpy_stages, model.program, lanes=8, cores=2, part="forward")
    assert {p[1].name: p[2] for p in params if p[0] == "transposed"} == {"U": (5, 12, 16), "W": (3, 5, 16)}
    text = func.script()
    for weight in ("U", "W"):          # one tile of 16 rows a gate (h = 6): row r of gate g to panel g, lane r
        writes = re.findall(weight + r"_T\[(.*)\] = " + weight + r"\[(.*)\]", text)
        # (v_7 a row of the tile, v_8 its column: each row of the weight read along its columns)
        assert writes == [("v_5 + v_7 // 16, v_6 * 16 + v_8, v_7 % 16", "v_5 * 6 + v_7, v_6 * 16 + v_8")], writes
    reads = set(re.findall(r"U_T\[([^\]]+)\]", after_transposes(text)))
    assert reads and all(re.fullmatch(r"v_(\d+) \+ v_(\d+) // 16, [^,]+, v_\2 % 16", r) for r in reads), reads
    _, gpu_params = adjoint_kernel.level_pass(stages, numpy_stages, model.program, part="forward", gpu=True)
    assert {p[1].name: p[2] for p in gpu_params if p[0] == "transposed"} == {"U": (12, 30), "W": (5, 18)}


def test_the_transposed_layout():
    """`Transposed`'s own example: w (10, 3) read as w[g * 5 + i, k] has a (2, 3, 16) copy, a panel
    a block, and w[7, k] at [1, k, 2]; a row not of the form b * 5 + i is refused (the numpy pass
    runs); without a block, the plain transpose (3, 10)."""
    g, i, k = (tvm.tirx.Var(n, "int32") for n in "gik")
    layout = Transposed((10, 3), 5)
    assert layout.shape == (2, 3, 16) and (layout.blocks, layout.padded) == (2, 16)
    index = layout.index([g * 5 + i, k], i)
    assert [str(e) for e in index] == ["g + i // 16", "k", "i % 16"]
    at_7 = [tvm.sym.Analyzer().simplify(tvm.tirx.Let(g, 1, tvm.tirx.Let(i, 2, e))) for e in (index[0], index[2])]
    assert [e.value for e in at_7] == [1, 2] and index[1].same_as(k)
    with pytest.raises(Unsupported, match="not b \\* 5"):
        layout.index([g * 3 + i, k], i)
    plain = Transposed((10, 3))
    assert plain.shape == (3, 10) and [e.same_as(v) for e, v in zip(plain.index([g, k], i), (k, g))] == [True, True]


def test_the_backward_reads_the_forwards_copy_with_widened_blocks():
    """TreeLSTM h = 6's backward reads U (5h, 2h) along its last axis (d h[child, j, k] from
    U[g * h + i, j * h + k]) and W (3h, x) along x: the forward and the recomputing pass copy
    each with its blocks of columns widened to lines, in panels (`Widened`: U_panels (2, 30, 16), W_panels
    (1, 18, 16)), and the backward reads the copy, never writing it or reading its pad columns: with these
    poisoned (NaN) between the forward and the pullback, the gradients are the numpy pass's; with the
    whole copies poisoned, every gradient is NaN (U's copy: every node's child adjoints; the embedding's
    rows the batch reads); the recomputing pass writes its own and is the numpy pass's."""
    trees, vocab = ct.data.sst_sample()
    model = ct.models.TreeLSTM(hidden_size=6, embed_size=5, vocab_size=len(vocab), seed=1)
    compiled = Adjoint(model.program, model.linearize, make_target("llvm"))
    params = compiled.level_pass.params
    assert {p[1].name: p[2] for p in params if p[0] == "widened"} == {"U": (2, 30, 16), "W": (1, 18, 16)}
    texts = {part: compiled.level_pass.build(part, True)[0].script() for part in ("forward", "backward", "all")}
    for part, text in texts.items():
        assert (re.search(r"U_panels\[v_\d+ \+ v_\d+ // 16, v_\d+, v_\d+ % 16\] = U\[", text) is not None) \
            == (part != "backward")
        assert (re.search(r"\* U_panels\[v_\d+ \+ v_\d+ // 16, [^,]+, v_\d+ % 16\]", text) is not None) \
            == (part != "forward"), part
    lin = model.linearize(trees[:9])
    states = model.numpy_forward(lin)
    d_states = random_adjoints(states, 2)
    want = numpy_gradients(model, lin, states, d_states)
    widened = {p[1].name: position for position, p in enumerate(params) if p[0] == "widened"}
    kept, token = compiled.forward(lin, model.weights)
    for name, block in (("U", 6), ("W", 5)):             # the pad lanes alone (a panel a block): never read
        copy = compiled.level_pass._arrays.by_param[widened[name]]
        copy[..., np.arange(16) >= block] = np.nan
    got = compiled.vjp(lin, kept, model.weights, [d.copy() for d in d_states], forwarded=token)
    assert compiled.level_pass.last_run[0] == "backward"
    assert_same_gradients(got, want, "pads poisoned")
    kept, token = compiled.forward(lin, model.weights)
    for position in widened.values():
        compiled.level_pass._arrays.by_param[position].fill(np.nan)
    got = compiled.vjp(lin, kept, model.weights, [d.copy() for d in d_states], forwarded=token)
    assert compiled.level_pass.last_run[0] == "backward" and all(np.isnan(got[w]).all() for w in ("W", "bW", "U", "bU"))
    read = np.unique(lin.words[lin.level_offsets[0]:lin.level_offsets[1]])      # the embedding's rows the batch reads
    assert np.isnan(got["emb"][read]).all() and not np.isnan(np.delete(got["emb"], read, axis=0)).any()
    got = compiled.vjp(lin, states, model.weights, [d.copy() for d in d_states])
    assert compiled.level_pass.last_run[0] == "all"
    assert_same_gradients(got, want)


@pytest.mark.parametrize("name", sorted(ct.models.BY_NAME))
def test_the_forward_then_the_backward_equal_numpy(name, sst):
    """Every zoo model at h = 6 (blocks of columns widened in every weight copy): the compiled
    forward's states, then the pullback on its kept values and the recomputing one, against the
    numpy pass."""
    model, lin, states, d_states, compiled = zoo_case(name, H, sst, 6, 3)
    assert_forward_then_both_pullbacks(compiled, lin, model.weights, states, d_states,
                                       numpy_gradients(model, lin, states, d_states))


def test_the_widened_layout():
    """`Widened`'s own example: w (3, 10) read as w[k, g * 5 + i] has a (2, 3, 16) copy, w[k, 7] at
    [1, k, 2]."""
    g, i, k = (tvm.tirx.Var(n, "int32") for n in "gik")
    layout = Widened((3, 10), 5)
    assert layout.shape == (2, 3, 16)
    panel, row, lane = layout.index([k, g * 5 + i], i)
    assert row.same_as(k) and (str(panel), str(lane)) == ("g + i // 16", "i % 16")


def test_the_level_pass_ir():
    """TreeFC, h = tanh(W @ (h_left + h_right) + b): first every node's values (a run of nodes
    per core, in parallel, each in tiles of 8 nodes, then tiles of 1, 2 and 4; the product with
    W reads W's transpose, one vector per load, into an 8 x 8-lane accumulator, the run's whole
    tiles in turn inside each chunk of columns), then the levels from the top down (the product
    with W in the other direction reads W's copy in a panel, W_panels), children's rows written
    except the null node's, then the sums over every node that give dW and db; no weight written."""
    func, params = _tree_fc_pass()
    text = func.script()
    recompute, levels = text.split("for v_5 in range(v - 2):")             # the internal levels ...
    levels, weights = levels.split("    for v_5 in T.parallel(3):\n        v_6: T.let[T.int32] = v_5 * 2 // 3")
    weights = "    for v_5 in T.parallel(3):\n        v_6: T.let[T.int32] = v_5 * 2 // 3" + weights  # ... then dW
    assert "level_offsets[v - 2 - v_5]" in levels                          # ... from the top down
    # each level's nodes in 3 runs of equal size (the cores given), in parallel; each run in
    # whole tiles of 8 nodes, then its rest in a tile of 1, of 2 and of 4 where its bit is set
    assert "for v_5 in T.parallel(3):" in recompute
    size = "level_offsets[v - 2 - v_5 + 1] - level_offsets[v - 2 - v_5]"
    assert "for v_6 in T.parallel(3):" in levels
    assert f"v_7: T.let[T.int32] = ({size}) * v_6 // 3" in levels                    # the run's first
    assert f"v_8: T.let[T.int32] = ({size}) * (v_6 + 1) // 3 - v_7" in levels       # its nodes
    assert "v_9: T.let[T.int32] = v_8 // 8" in levels and "for v_10 in range(v_9):" in levels
    for bit in ("% 2 == 1", "// 2 % 2 == 1", "// 4 % 2 == 1"):
        assert f"if (v_8 - v_9 * 8) {bit}:" in levels
    assert levels.count("T.parallel(") == 2                     # the internal levels', the leaves'
    # a register tile holds 8 sums whatever its nodes: 8 nodes x 1 vector of 8 lanes; a smaller
    # tile, 8 / nodes vectors (here all 16 columns)
    assert "T.alloc_local((8, 8))" in levels
    for tile in (4, 2, 1):
        assert f"T.alloc_local(({tile}, 16))" in levels
    # the chunks of columns (2 of 8 lanes) outside, the whole tiles (v_8 of them) inside: a
    # chunk's columns of W_T serve every tile of the run
    assert "for v_9, v_10 in T.grid(2, v_8):" in recompute
    assert "internal_internal_h_sum[v_6 + v_10 * 8 + v_11, v_9 * 8 + v_12] = buffer[v_11, v_12]" in recompute
    assert ("W_T[(v_9 * 8 + v_13) // 16, v_11, (v_9 * 8 + v_13) % 16] * internal_child_sum[v_6 + v_10 * 8 + v_12, "
            "v_11]") in recompute
    assert "for v_10, v_11 in T.grid(2, v_9):" in levels
    assert ("d_internal_internal_h_sum[level_offsets[v - 2 - v_5] - level_offsets[1] + (v_7 + v_11 * 8 + v_13), v_12]"
            " * W_panels[(v_10 * 8 + v_14) // 16, v_12, (v_10 * 8 + v_14) % 16]") in levels
    assert "children[level_offsets[v - 2 - v_5] + (v_7 + v_10 * 8 + v_11), 1] != 0" in levels
    assert "T.vectorized(8)" in levels
    # dW[i, k] = sum over every internal node of d h_sum[n, i] * child_sum[n, k], a packed
    # product: W's 2 tiles of 8 rows split over the 3 cores; for each block of 32 nodes, a core
    # copies child_sum's block into a panel of 2 chunks of 32 x 8,
    # then for each of its tiles d h_sum's 8 rows of the block into a panel of 32 x 8, and sums
    # each chunk from the two panels into an 8-row x 8-lane register tile, which the first
    # block starts from zero (dW is not zeroed by the caller); the last block packs and sums only
    # its nodes (v_9 of the 32)
    count = "level_offsets[v - 1] - level_offsets[1]"
    blocks = "T.max((level_offsets[v - 1] + 31 - level_offsets[1]) // 32, 1)"
    assert f"for v_8 in range({blocks}):" in weights
    assert f"v_9: T.let[T.int32] = T.min(32, {count} - v_8 * 32)" in weights
    assert "for v_10, v_11, v_12 in T.grid(1, v_9, 2):" in weights and "for v_13 in range(v_9):" in weights
    assert (f"buffer[v_10 * 512 + (v_12 * 8 * 32 + v_11 * 8 + v_13)] = T.if_then_else(v_8 * 32 + v_11 < {count}, "
            f"internal_child_sum[T.min(v_8 * 32 + v_11, {count} - 1), v_12 * 8 + v_13], T.float32(0.0))") in weights
    assert (f"buffer_1[v_11 * 8 + v_12] = T.if_then_else(v_8 * 32 + v_11 < {count}, d_internal_internal_h_sum["
            f"T.min(v_8 * 32 + v_11, {count} - 1), T.min(v_10 * 8 + v_12, 15)], T.float32(0.0))") in weights
    assert ("buffer_2[v_13, v_14] = T.Select(v_8 == 0, T.float32(0.0), "
            "grad_internal_internal_h_sum_0[T.min(v_10 * 8 + v_13, 15), v_12 * 8 + v_14])") in weights
    assert ("buffer_2[v_14, v_15] + buffer_1[v_13 * 8 + v_14] * buffer[v_11 * 512 + (v_12 * 8 * 32 + v_13 * 8 + v_15)]"
            in weights)
    assert ("grad_internal_internal_h_sum_0[T.min(v_10 * 8 + v_13, 15), v_12 * 8 + v_14] = buffer_2[v_13, v_14]"
            in weights)
    # db (a sum of d h_sum alone: no product to pack) in 32-node blocks, read where it lies
    assert "grad_internal_internal_h_0[v_7 * 8 + v_9] = buffer[v_8, v_9]" in weights
    assert ("buffer[v_8, v_9] = T.Select(v_6 == 0, T.float32(0.0), grad_internal_internal_h_0[v_7 * 8 + v_9])"
            in weights)
    # tanh's derivative reads the recomputed value, not a second tanh
    assert "(T.float32(1.0) - internal_internal_h[level_offsets" in levels
    assert {p[0] for p in params} == {"level_offsets", "leaf_sources", "placeholder", "transposed", "state", "d_state",
                                      "value", "adj", "weight_read", "gathered", "gathered_sum", "widened"}
    assert sorted(p[5].name for p in params if p[0] == "weight_read") == ["W", "b"]
    # emb is read through the leaf's word: each leaf's adjoint row of it (TreeFC's leaf h is its
    # embedding row), then, after every level, the rows added into emb's gradient by word, leaf
    # after leaf (a word recurs: serial, in a fixed order); no weight is written here
    assert [(p[1], p[3].name, p[4].name) for p in params if p[0] == "gathered"] == [("leaf", "emb", "word")]
    assert [p[1].name for p in params if p[0] == "gathered_sum"] == ["emb"]
    assert ("d_leaf_emb_rows0[v_6 + v_9 * 8 + v_10, v_11 * 8 + v_12] = d_leaf_emb_rows0[v_6 + v_9 * 8 + v_10,"
            " v_11 * 8 + v_12] + d_leaf_leaf_h[v_6 + v_9 * 8 + v_10, v_11 * 8 + v_12]") in levels
    by_word = weights.split("    for v_5 in range(level_offsets[1] - level_offsets[0] - v_1):")[1]
    assert "v_6: T.let[T.int32] = word[level_offsets[0] + v_5]" in by_word
    assert ("grad_emb[v_6, v_7 * 8 + v_8] = grad_emb[v_6, v_7 * 8 + v_8] + d_leaf_emb_rows0[v_5, v_7 * 8 + v_8]"
            in by_word)
    assert "T.parallel(" not in by_word
    assert re.search(r"^\s*(emb|W|b)\[.*\] =", text, re.M) is None
    serial, _ = _tree_fc_pass(parallel=False)                 # a DAG's: the weights' sums stay parallel
    assert "T.parallel(" not in after_transposes(serial.script()).split("    for v_5 in T.parallel(3):")[0]
    assert "T.min(v_" not in recompute + levels               # no node clamped, none computed twice


def test_words_inner_nodes_may_lack_are_gathered_at_the_clamped_row():
    """ChildSumTreeLSTM reads `emb[min(word, V-1)]` at every node, under `if_then_else(word != V, ..,
    0)` at inner nodes (`NodeInput.missing`): both stages' reads are gathered by the compiled pass
    and added into emb's gradient at the clamped row (a word-less node adds zeros at row V-1), no
    block is left to the numpy weight pass, and the gradients equal numpy's
    (`test_compiled_level_pass_equals_numpy`)."""
    V = 30
    model = ct.models.ChildSumTreeLSTM(hidden_size=H, vocab_size=V)
    adjoint = Adjoint(model.program, model.linearize, make_target("llvm"))
    level_pass = adjoint.level_pass
    assert level_pass is not None, adjoint.level_pass_note
    assert sorted((p[1], p[3].name) for p in level_pass.params if p[0] == "gathered") == [
        ("internal", "emb"), ("leaf", "emb")]
    for name, stage in adjoint.stages.items():       # every block with a weight read is the pass's
        reading = {block.name for block in stage.blocks
                   if any(isinstance(stage.placeholder_of.get(ld.source), ra.Weight) for ld in loads(block.body))}
        assert reading and reading <= {key.split("#")[0] for key in level_pass.weight_blocks[name]}, name
    func, _ = level_pass.build("backward", True)
    text = func.script()
    assert len(re.findall(rf"T.let\[T.int32\] = T.min\(word\[level_offsets\[\w+\] \+ v_\d+\], {V - 1}\)", text)) == 2


def test_numpy_pass_without_a_target():
    model = ct.models.TreeFC(hidden_size=4, vocab_size=10)
    adjoint = Adjoint(model.program, model.linearize)
    assert adjoint.level_pass is None and adjoint.level_pass_note == "no target given"


def test_gradients_held_stay_and_gradients_let_go_are_reused(sst):
    """`vjp`'s gradients come from a pool (`scratch.Recycled`): fresh arrays page-fault at their
    first write.  One the caller still holds is never written again; one let go is reused, and
    zeroed first (the same numbers as the first time).  With the garbage collector off: an
    array let go must be free at once, not kept by a reference cycle until a collection."""
    gc.disable()
    try:
        _check_gradients_pooled(sst)
    finally:
        gc.enable()


def _check_gradients_pooled(sst):
    trees, vocab = sst
    compiled = ct.models.TreeFC(hidden_size=H, vocab_size=len(vocab)).compile(training=True)
    d_roots = np.random.default_rng(2).standard_normal((3, H)).astype(np.float32)
    first = compiled.vjp(trees[:3])[1](d_roots)
    kept = {name: g.copy() for name, g in first.items()}
    second = compiled.vjp(trees[3:6])[1](d_roots)
    for name in first:
        assert second[name] is not first[name]
        np.testing.assert_array_equal(first[name], kept[name], err_msg=name)
    numbers = {name: g.copy() for name, g in second.items()}
    addresses = {name: g.ctypes.data for name, g in second.items()}
    del second
    again = compiled.vjp(trees[3:6])[1](d_roots)
    assert {name: g.ctypes.data for name, g in again.items()} == addresses
    for name in numbers:
        assert np.abs(numbers[name]).max() > 0, name          # the comparison can fail
        np.testing.assert_array_equal(again[name], numbers[name], err_msg=name)


def test_a_weight_sum_is_written_into_its_gradient(sst):
    """A weight read alike by every node of one stage, summed by the pass over all of them, that no
    other read sums into (TreeLSTM's four) is its gradient as it stands (`LevelPass.in_place`):
    the pass writes the gradient array itself, which the pool hands out unzeroed (`Recycled.empty`);
    a weight two stages read (ChildSum's W_iou and biases) is summed apart and added.  With the pool's arrays
    poisoned (NaN) between two calls on one batch, every gradient comes back as the first time:
    each in-place sum writes every element, and the others are zeroed first."""
    trees, vocab = sst
    for name, in_place, added in (("treelstm", {"W", "bW", "U", "bU"}, set()),
                                  ("childsum", {"U_iou", "U_f", "W_f", "bU_f", "b_f"}, {"b_iou", "bU_iou", "W_iou"})):
        model = ct.models.BY_NAME[name](hidden_size=H, vocab_size=len(vocab))
        compiled = model.compile(training=True)
        level_pass = compiled.adjoint.level_pass
        reads = [(position, p[5].name) for position, p in enumerate(level_pass.params) if p[0] == "weight_read"]
        assert {w for position, w in reads if position in level_pass.in_place} == in_place, name
        assert {w for position, w in reads if position not in level_pass.in_place} == added, name
        d_roots = np.random.default_rng(3).standard_normal((4, H)).astype(np.float32)
        first = {k: g.copy() for k, g in compiled.vjp(trees[:4])[1](d_roots).items()}
        pool = compiled.adjoint._gradients._local.arrays
        assert set(in_place) <= set(pool)
        for pooled in pool.values():
            pooled.fill(np.nan)
        again = compiled.vjp(trees[:4])[1](d_roots)
        assert all(np.isfinite(g).all() for g in first.values()) and np.abs(first["U_iou" if added else "U"]).max() > 0
        for weight in first:
            np.testing.assert_array_equal(again[weight], first[weight], err_msg=f"{name} {weight}")


def test_the_forward_keeps_each_state_once(sst):
    """The values of TreeLSTM's c and h blocks are the rows of the state arrays the forward
    returns, not arrays of their own beside them: between the forward and the pullback a node
    holds its gates (5 vectors of H; 3 at a leaf) and its two states, 7 vectors (5 at a leaf),
    where it held 9 (7) before.  The recomputing pass ("all", on states another kernel made)
    keeps arrays of its own and leaves the states alone."""
    trees, vocab = sst
    model = ct.models.TreeLSTM(hidden_size=H, vocab_size=len(vocab))
    compiled = Adjoint(model.program, model.linearize, make_target("llvm"))
    lin = model.linearize(trees[:12])
    states, token = compiled.forward(lin, model.weights)
    for stage, gates in (("internal", 5), ("leaf", 3)):
        widths = {str(key[1]).split("#")[0]: int(np.prod(array.shape[1:]))
                  for key, array in compiled._workspace(stage).items() if key[0] == "value"}
        assert sum(widths.values()) == gates * H, widths
        assert compiled.level_pass.saved_vectors(stage) == gates + 2
    before = [s.copy() for s in states]
    d_states = random_adjoints(states, 5)
    for forwarded in (token, None):
        compiled.vjp(lin, states, model.weights, [d.copy() for d in d_states], forwarded=forwarded)
        for mine, kept in zip(states, before):
            np.testing.assert_array_equal(mine, kept)


def test_values_the_backward_never_reads_are_kept_one_level_at_a_time(sst):
    """TreeLSTM's gates_sum (5 vectors of H per internal node) is read by its gates alone, never
    by the backward: the training forward keeps it for one level only (a transient value), and a
    node keeps 7 vectors (gates, c, h) instead of 12; a leaf 5 instead of 8.  The gradients stay
    the numpy pass's (the forward then the backward, and the recomputation)."""
    trees, vocab = sst
    model = ct.models.TreeLSTM(hidden_size=H, vocab_size=len(vocab))
    compiled = Adjoint(model.program, model.linearize, make_target("llvm"))
    level_pass = compiled.level_pass
    names = {stage: sorted(str(key).split("#")[0] for key in keys) for stage, keys in level_pass.transient.items()}
    assert names == {"leaf": ["leaf_gates_sum"], "internal": ["gates_sum"]}
    assert level_pass.saved_vectors("internal") == 7 and level_pass.saved_vectors("leaf") == 5
    roles = {(p[1], str(p[2]).split("#")[0]): p[0] for p in level_pass.params if p[0] in ("value", "transient")}
    assert roles[("internal", "gates_sum")] == "transient" and roles[("internal", "gates")] == "value"
    lin = model.linearize(trees[:12])
    sizes = np.diff(lin.level_offsets)
    assert adjoint_pass._transient_rows(lin, "internal", "forward") == sizes[1:].max() < sizes[1:].sum()
    assert adjoint_pass._transient_rows(lin, "internal", "all") == sizes[1:].sum()
    assert adjoint_pass._transient_rows(lin, "leaf", "backward") == 0
    states = model.numpy_forward(lin)
    d_states = random_adjoints(states, 3)
    want = Adjoint(model.program, model.linearize).vjp(lin, states, model.weights, [d.copy() for d in d_states])
    kept_states, token = compiled.forward(lin, model.weights)
    for mine, theirs in zip(kept_states, states):
        np.testing.assert_allclose(mine[lin.node_slots], theirs[lin.node_slots], rtol=0, atol=1e-5)
    for forwarded in (token, None):                  # the kept values, then the recomputation
        got = compiled.vjp(lin, kept_states, model.weights, [d.copy() for d in d_states], forwarded=forwarded)
        assert compiled.level_pass.last_run[0] == ("backward" if forwarded else "all")
        for weight in want:
            scale = float(np.abs(want[weight]).max())
            np.testing.assert_allclose(got[weight], want[weight], rtol=0, atol=2e-5 * scale, err_msg=weight)


def test_a_training_pass_builds_once_per_process_and_serves_other_weights(sst, monkeypatch):
    """The level pass (the training forward and backward) goes through the same cache: a second
    model of the same program compiles nothing, and its gradients are its own weights' (the numpy
    backward's, on the same states and adjoints)."""
    trees = sst[0][:6]
    ct.models.TreeFC(hidden_size=8, vocab_size=len(sst[1]), seed=7).compile(training=True)
    count, real, calls = ct.compile_count(), tvm.compile, []
    monkeypatch.setattr(tvm, "compile", lambda *args, **kwargs: calls.append(args) or real(*args, **kwargs))
    model = ct.models.TreeFC(hidden_size=8, vocab_size=len(sst[1]), seed=8)
    compiled = model.compile(training=True)
    assert not calls and ct.compile_count() == count
    assert compiled.adjoint.level_pass is not None, compiled.adjoint.level_pass_note
    out, vjp = compiled.vjp(trees, all_nodes=True)
    d_out = [np.random.default_rng(1).standard_normal(o.shape).astype(np.float32) for o in out]
    grads = vjp(d_out)
    lin = model.linearize(trees)
    states = model.numpy_forward(lin)
    d_states = [np.zeros_like(s) for s in states]
    d_states[0][lin.node_slots] = np.concatenate(d_out)
    want = numpy_gradients(model, lin, states, d_states)
    assert set(grads) == set(want)
    for name in want:
        np.testing.assert_allclose(grads[name], want[name], rtol=1e-4, atol=1e-5, err_msg=name)
