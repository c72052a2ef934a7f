"""Cells in no zoo compile and match numpy references written from their equations.

The references run node by node in float64 over `ct.data.postorder`, written
here from each cell's formula: nothing comes from the trace or the RA program.
"""
import numpy as np
import pytest

import cortex_tvm as ct
from cortex_tvm.build import schedule_model
from cortex_tvm.frontend import TracedModel, with_unroll_depth

from . import cells

H, V = 16, 50
TOL = 1e-5


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def _per_node(trees, max_children, leaf, inner, states=1):
    """Root states of each tree: leaf(word) / inner([child states] padded with zeros)."""
    roots = []
    for tree in trees:
        value = {}
        for node in ct.data.postorder(tree):
            if node.is_leaf:
                value[id(node)] = leaf(node.word)
            else:
                kids = [value[id(c)] for c in node.children]
                kids += [tuple(np.zeros(H) for _ in range(states))] * (max_children - len(kids))
                value[id(node)] = inner(kids)
        roots.append(value[id(tree)][0])
    return np.array(roots)


def _weights(shapes, seed):
    rng = np.random.default_rng(seed)
    return {k: (rng.standard_normal(s) / np.sqrt(s[-1])).astype(np.float32) for k, s in shapes.items()}


def _gated_reference(trees, w):
    w = {k: v.astype(np.float64) for k, v in w.items()}

    def inner(kids):
        (hl,), (hr,) = kids
        x = np.concatenate([hl, hr])
        z = _sigmoid(w["Wz"] @ x + w["bz"])
        return (z * np.tanh(w["W"] @ x + w["b"]) + (1 - z) * (hl + hr) / 2,)
    return _per_node(trees, 2, lambda word: (w["emb"][word],), inner)


def _every_op_reference(trees, w):
    w = {k: v.astype(np.float64) for k, v in w.items()}
    relu = lambda v: np.maximum(v, 0)  # noqa: E731

    def leaf(word):
        x = w["emb"][word]
        return np.concatenate([relu(x[:H // 2]), -x[H // 2:]]), np.exp(-relu(x))

    def inner(kids):
        (h0, s0), (h1, s1), (h2, s2) = kids
        y = relu(w["A"] @ (h0 - 0.5 * h1) + w["A"] @ w["v"]) / (1.0 + s2)
        z = w["B"] @ np.concatenate([h0 * s1, h2[H // 2:]])
        return np.tanh(y + np.concatenate([h2[H // 2:], h2[:H // 2]]) + z), s0 * 0.25 + np.exp(-y * y) / 3
    return _per_node(trees, 3, leaf, inner, states=2)


def _ternary_trees(count, seed):
    rng = np.random.default_rng(seed)
    trees = []
    for _ in range(count):
        items = [ct.data.Node(word=int(w)) for w in rng.integers(0, V, int(rng.integers(1, 20)))]
        while len(items) > 1:
            k, i = int(rng.integers(1, 4)), int(rng.integers(0, len(items)))
            items[i:i + k] = [ct.data.Node(children=items[i:i + k])]
        trees.append(items[0])
    return trees


GATED_SHAPES = {"emb": (V, H), "Wz": (H, 2 * H), "bz": (H,), "W": (H, 2 * H), "b": (H,)}
EVERY_SHAPES = {"emb": (V, H), "A": (H, H), "v": (H,), "B": (H, H + H // 2)}
TREES = ct.data.random_trees(10, (1, 40), seed=11, vocab_size=V)
TERNARY = _ternary_trees(10, seed=12)


@pytest.fixture(scope="module")
def gated():
    w = _weights(GATED_SHAPES, seed=1)
    return w, ct.compile(cells.gated_rnn, weights=w, max_children=2)


def test_gated_tree_rnn_equals_numpy(gated):
    w, compiled = gated
    np.testing.assert_allclose(compiled(TREES), _gated_reference(TREES, w), atol=TOL, rtol=0)


def test_gated_tree_rnn_trace_reference_equals_numpy(gated):
    w, _ = gated
    traced = TracedModel(cells.gated_rnn, w, 2)
    np.testing.assert_allclose(traced.reference(TREES), _gated_reference(TREES, w), atol=TOL, rtol=0)


def test_gated_tree_rnn_on_a_single_leaf_and_a_deep_chain(gated):
    w, compiled = gated
    trees = [ct.data.Node(word=4), ct.data.chain_tree(60, seed=2, vocab_size=V)]
    np.testing.assert_allclose(compiled(trees), _gated_reference(trees, w), atol=TOL, rtol=0)


@pytest.mark.parametrize("schedule", [None, "none"])
def test_every_op_equals_numpy(schedule):
    w = _weights(EVERY_SHAPES, seed=3)
    compiled = ct.compile(cells.every_op, weights=w, max_children=3, schedule=schedule)
    expected = _every_op_reference(TERNARY, w)
    np.testing.assert_allclose(compiled(TERNARY), expected, atol=TOL, rtol=0)
    np.testing.assert_allclose(TracedModel(cells.every_op, w, 3).reference(TERNARY), expected,
                               atol=TOL, rtol=0)


@pytest.mark.parametrize("depth", [1, 3])
def test_max_unroll_depth(gated, depth):
    """max_unroll_depth is CORTEX's recursive unrolling (unroll_recursion, one chunk per core) and
    keeps the numbers; 1 leaves the schedule without it."""
    w, _ = gated
    compiled = ct.compile(cells.gated_rnn, weights=w, max_children=2, max_unroll_depth=depth)
    np.testing.assert_allclose(compiled(TREES), _gated_reference(TREES, w), atol=TOL, rtol=0)
    assert compiled.plan.recursion_depth == depth
    traced, target = TracedModel(cells.gated_rnn, w, 2), ct.make_target("llvm")
    rs, _ = schedule_model(traced, target, with_unroll_depth(traced, target, None, depth))
    unrolls = [s.as_json()["args"] for s in rs.trace if s.primitive == "unroll_recursion"]
    assert unrolls == ([] if depth == 1 else [{"depth": depth, "chunks": ct.target.cpu_info(target).cores}])


def test_max_unroll_depth_sets_the_knob_of_a_recipe_that_has_one():
    zoo = ct.models.TreeLSTM(hidden_size=H, vocab_size=V)
    traced = TracedModel(cells.tree_lstm, zoo.weights)
    recipe = with_unroll_depth(traced, ct.make_target("llvm"), None, 2)
    assert recipe.knob_values()["recursion_depth"] == 2
    # a recipe without the knob: its parallel columns turned off, then unroll_recursion
    compiled = ct.compile(cells.tree_lstm, weights=zoo.weights, schedule="treelstm_llvm", max_unroll_depth=2)
    assert compiled.plan.recursion_depth == 2
    assert "parallel_columns" not in [s["primitive"] for s in compiled.trace]
    np.testing.assert_allclose(compiled(TREES), zoo.reference(TREES), atol=TOL, rtol=0)


@pytest.mark.parametrize("depth", [0, -1, 1.5, True, "2"])
def test_max_unroll_depth_must_be_a_positive_int(gated, depth):
    w, _ = gated
    with pytest.raises(ValueError, match="max_unroll_depth"):
        ct.compile(cells.gated_rnn, weights=w, max_children=2, max_unroll_depth=depth)


def test_unused_weights_are_accepted_and_stay_out_of_the_kernel(gated):
    w, _ = gated
    compiled = ct.compile(cells.gated_rnn, weights={**w, "spare": np.ones(3, np.float32)})
    assert "spare" not in compiled.lowered.params
    np.testing.assert_allclose(compiled(TREES), _gated_reference(TREES, w), atol=TOL, rtol=0)
