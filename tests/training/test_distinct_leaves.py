"""Leaves that repeat a word, computed once (`distinct_leaves`): the layout (made at once, or from a
plain one), the IR of the compiled pass on it, and its gradients, which must be the numpy
backward's on the plain layout (where every leaf is computed) for every zoo model, on the
forward's kept values (every state row written) and with the recomputation, with an adjoint on
every state of every node (so the repeats' own adjoints count)."""
import dataclasses
import functools

import numpy as np
import pytest

import cortex_tvm as ct
from cortex_tvm import adjoint_kernel, lower
from cortex_tvm.adjoint import Adjoint
from cortex_tvm.distinct_leaves import distinct_leaf_count, distinct_leaves_first
from cortex_tvm.stage_numpy import StageNumpy

from test_linearize_parents import to_forest  # noqa: E402 - tests/ is on sys.path (conftest)

from .numpy_twin import assert_kept_states, assert_same_gradients, numpy_gradients, zoo_case

H = 6


def test_the_layout_lists_each_words_first_leaf_before_its_repeats(sst):
    trees, vocab = sst
    plain = ct.models.TreeLSTM(hidden_size=4, vocab_size=len(vocab)).linearize(trees[:25])
    lin = distinct_leaves_first(plain)
    first, end = (int(o) for o in plain.level_offsets[:2])
    computed, repeats = distinct_leaf_count(lin), lin.leaf_sources
    words = lin.words[first:end]
    # each word once, then the repeats, each naming a leaf of its word among the first ones
    assert computed == len(set(words[:computed])) == len(set(plain.words[first:end])) == end - first - len(repeats)
    assert len(repeats) > 100 and repeats.dtype == np.int32
    np.testing.assert_array_equal(lin.words[repeats], words[computed:])
    assert ((repeats >= first) & (repeats < first + computed)).all()
    # every node keeps its word, its child count, its children (followed to their new slots) and
    # its place among the roots; only level 0 moves
    moved = np.zeros(plain.num_slots, np.int64)            # plain slot -> its slot in lin (0: the null node)
    moved[plain.node_slots] = lin.node_slots
    np.testing.assert_array_equal(lin.level_offsets, plain.level_offsets)
    np.testing.assert_array_equal(lin.words[lin.node_slots], plain.words[plain.node_slots])
    np.testing.assert_array_equal(lin.num_children[lin.node_slots], plain.num_children[plain.node_slots])
    np.testing.assert_array_equal(lin.children[lin.node_slots], moved[plain.children[plain.node_slots]])
    np.testing.assert_array_equal(lin.roots, moved[plain.roots])
    upper = plain.node_slots >= end
    np.testing.assert_array_equal(lin.node_slots[upper], plain.node_slots[upper])
    assert sorted(lin.node_slots[~upper]) == list(range(first, end))


@pytest.mark.parametrize("name", sorted(ct.models.BY_NAME))
def test_the_layout_made_at_once_is_the_one_made_after(name, sst):
    """`linearize(..., distinct_leaves=True)` (the training pass's layout, repeats ordered as the
    nodes are sorted into slots) equals `distinct_leaves_first` of the plain layout, array for
    array, for every zoo model on SST batches, and for a forest given as parent arrays;
    `leaf_words` are the leaves' distinct words, which `Adjoint.word_rows` then reads."""
    trees, vocab = sst
    model = ct.models.BY_NAME[name](hidden_size=4, vocab_size=len(vocab))
    chains = model.max_children == 1            # (the sequence models: chains of SST's leaves' words)
    for start, end in ((0, 1), (0, 25), (100, 140)):
        batch = trees[start:end]
        if chains:
            batch = [ct.data.sequence([n.word for n in ct.data.postorder(t) if n.word is not None]) for t in batch]
        plain, fused = model.linearize(batch), model.linearize(batch, distinct_leaves=True)
        after = distinct_leaves_first(plain)
        for field in dataclasses.fields(fused):
            want, got = getattr(after, field.name), getattr(fused, field.name)
            assert (want is None and got is None) or np.array_equal(got, want), field.name
    forest = ct.models.TreeLSTM(hidden_size=4, vocab_size=len(vocab)).compile(training=True)
    parents, words = to_forest(trees[:25])
    plain = forest.signature.layout_parents(parents, words, 1, True, len(vocab))
    fused = forest.adjoint.lay_out(None, arrays=functools.partial(forest.signature.layout_parents, parents, words, 1,
                                                                  True, len(vocab)))
    after = distinct_leaves_first(plain)
    for field in dataclasses.fields(fused):
        want, got = getattr(after, field.name), getattr(fused, field.name)
        assert (want is None and got is None) or np.array_equal(got, want), field.name
    rows = forest.adjoint.word_rows(fused)["emb"]
    np.testing.assert_array_equal(rows, np.unique(words[words >= 0]))


def test_a_batch_without_a_repeated_word_keeps_its_layout():
    tree = ct.data.Node(children=[ct.data.Node(word=1), ct.data.Node(children=[ct.data.Node(word=2),
                                                                                ct.data.Node(word=3)])])
    plain = ct.models.TreeLSTM(hidden_size=4, vocab_size=5).linearize([tree])
    assert distinct_leaves_first(plain) is plain and distinct_leaf_count(plain) == 3


@pytest.mark.parametrize("name", sorted(ct.models.BY_NAME))
def test_the_pass_on_distinct_leaves_gives_the_numpy_gradients(name, sst, monkeypatch):
    model, plain, states, d_states, compiled = zoo_case(name, H, sst, 40, 3)
    want = numpy_gradients(model, plain, states, d_states)
    assert compiled.distinct_leaves
    lin = compiled.layout(plain)
    assert lin.leaf_sources is not None and len(lin.leaf_sources) > 0

    def moved(arrays):                             # rows of the plain layout -> lin's slots
        out = [np.zeros_like(a) for a in arrays]
        for mine, theirs in zip(out, arrays):
            mine[lin.node_slots] = theirs[plain.node_slots]
        return out
    kept, token = compiled.forward(lin, model.weights)
    assert_kept_states(kept, moved(states), lin)      # the repeats' states copied from their word's leaf
    # the forward's states come from np.empty: it writes every row of the states a stage makes, and
    # zeroes the rest (the null node's; the child-sum TreeLSTM's leaves' c): fresh memory full of NaN
    # gives the same states, bit for bit
    empty = np.empty
    monkeypatch.setattr(np, "empty", lambda shape, dtype=float, **k: np.full(shape, np.nan, dtype))
    again, _ = compiled.forward(lin, model.weights)
    monkeypatch.setattr(np, "empty", empty)
    for mine, theirs in zip(again, kept):
        assert not np.isnan(mine).any() and not mine[0].any()
        np.testing.assert_array_equal(mine, theirs)
    kept, token = compiled.forward(lin, model.weights)
    for part, values, forwarded in (("backward", kept, token), ("all", moved(states), None)):
        got = compiled.vjp(lin, values, model.weights, moved(d_states), forwarded=forwarded)
        assert compiled.level_pass.last_run[0] == part
        assert_same_gradients(got, want, part)


def test_compile_takes_the_distinct_leaves_on_a_cpu_and_every_leaf_on_a_gpu():
    model = ct.models.TreeLSTM(hidden_size=8, vocab_size=20)
    assert model.compile(training=True).adjoint.distinct_leaves
    assert not model.compile(training=True, target="cuda").adjoint.distinct_leaves
    numpy_only = Adjoint(model.program, model.linearize)
    assert not numpy_only.distinct_leaves
    tree = ct.data.Node(children=[ct.data.Node(word=1), ct.data.Node(word=1)])
    lin = distinct_leaves_first(model.linearize([tree]))
    states = model.numpy_forward(lin)
    with pytest.raises(ValueError, match="numpy backward runs every leaf"):
        numpy_only.vjp(lin, states, model.weights, [np.zeros_like(s) for s in states])


def test_the_ir_copies_the_repeats_forward_and_adds_their_adjoints_back():
    """TreeFC: the forward computes the leaves but the repeats, then copies each repeat's state
    row from its word's leaf (in parallel: each writes its own row); the backward adds each
    repeat's adjoint row into that leaf's, serially (a word repeats many times), after the
    internal levels and before the leaves' level, which runs on the others alone."""
    model = ct.models.TreeFC(hidden_size=16, vocab_size=20)
    stages = {n: lower.build_stage(model.program, n) for n in ("leaf", "internal")}
    numpy_stages = {n: StageNumpy(s) for n, s in stages.items()}
    leaves = "level_offsets[1] - level_offsets[0] - v_1"
    repeat = f"level_offsets[0] + ({leaves}) + v_5"
    forward, _ = adjoint_kernel.level_pass(stages, numpy_stages, model.program, lanes=8, cores=2, part="forward")
    text = forward.script()
    assert 'leaf_sources: T.Buffer(("v_1",), "int32"' in text
    leaf_level, rest = text.split("    for v_5 in T.parallel(v_1):")
    assert f"({leaves}) * v_5 // 2" in leaf_level                           # the leaves' runs
    copy, internal = rest.split("for v_5 in range(1, 1 + (v - 2)):")
    assert "v_6: T.let[T.int32] = leaf_sources[v_5]" in copy
    assert f"h[{repeat}, v_7 * 8 + v_8] = h[v_6, v_7 * 8 + v_8]" in copy
    backward, _ = adjoint_kernel.level_pass(stages, numpy_stages, model.program, lanes=8, cores=2, part="backward")
    levels, rest = backward.script().split("    for v_5 in range(v_1):")
    assert "for v_5 in range(v - 2):" in levels                             # the internal levels first
    fold, leaf_level = rest.split("T.parallel(2)", 1)
    assert f"d_h[v_6, v_7 * 8 + v_8] = d_h[v_6, v_7 * 8 + v_8] + d_h[{repeat}, v_7 * 8 + v_8]" in fold
    assert f"({leaves}) * v_5 // 2" in leaf_level
