"""linearize_parents: a forest given as parent/word arrays laid out in numpy alone.  The same
arrays as the Node path (`linearize(from_parents(...))`), node_slots in the caller's node order,
the compiled results of `compiled(parents=..., words=...)`, and every validation error."""
import numpy as np
import pytest

import cortex_tvm as ct
from cortex_tvm.linearize import linearize
from cortex_tvm.linearize_arrays import linearize_parents

from padded import compile_padded

SHARED = ("level_offsets", "children", "num_children", "words", "roots", "tree_sizes")


def to_forest(trees, rng=None):
    """Trees as one (parents, words) forest: each tree in post-order, trees one after another.
    With rng, the node ids are renumbered at random keeping each node's children in increasing
    index order and the roots in their order (so from_parents gives the same trees); returns
    the new id of every post-order node too."""
    parents, words = [], []
    for tree in trees:
        nodes = ct.data.postorder(tree)
        base = len(parents)
        index = {id(n): base + i for i, n in enumerate(nodes)}
        parents += [-1] * len(nodes)
        for n in nodes:
            for c in n.children or []:
                parents[index[id(c)]] = index[id(n)]
        words += [-1 if n.word is None else n.word for n in nodes]
    parents, words = np.array(parents), np.array(words)
    if rng is None:
        return parents, words
    new_id = rng.permutation(len(parents))
    for p in np.unique(parents):                      # each sibling group (and the roots) keeps its order
        group = np.flatnonzero(parents == p)
        new_id[group] = np.sort(new_id[group])
    shuffled = np.full(len(parents), -1)
    shuffled[new_id] = np.where(parents >= 0, new_id[np.maximum(parents, 0)], -1)
    out_words = np.empty_like(words)
    out_words[new_id] = words
    return shuffled, out_words, new_id


def assert_same_layout(got, want, names=SHARED):
    for name in names:
        a, b = getattr(got, name), getattr(want, name)
        assert a.dtype == np.int32 and a.flags.c_contiguous, name
        np.testing.assert_array_equal(a, b, err_msg=name)


def assert_node_slots(lin, parents, words, no_word=None):
    """node_slots[i] is node i's slot: its word, each parent's children, the roots."""
    n = len(parents)
    slots = lin.node_slots
    assert slots.shape == (n,) and len(set(slots.tolist())) == n and slots.min() >= 1
    has = words >= 0
    np.testing.assert_array_equal(lin.words[slots[has]], words[has])
    if no_word is not None:
        assert (lin.words[slots[~has]] == no_word).all()
    for i in np.flatnonzero(parents >= 0):
        p = parents[i]
        rank = np.count_nonzero(parents[:i] == p)             # children in increasing index order
        assert lin.children[slots[p], rank] == slots[i]
    np.testing.assert_array_equal(lin.roots, slots[parents < 0])
    assert lin.tree_sizes.sum() == n


# ---------------------------------------------------------------- the same layout as the Node path

def test_three_leaf_tree_in_any_order():
    # ids 0=a 1=b 2=c 3=(a b) 4=root; the root's children in index order: c, then (a b)
    parents, words = np.array([3, 3, 4, 4, -1]), np.array([5, 6, 7, -1, -1])
    lin = linearize_parents(parents, words, max_children=2)
    want = linearize(ct.data.from_parents(parents, words), max_children=2)
    assert_same_layout(lin, want)
    np.testing.assert_array_equal(lin.level_offsets, [1, 4, 5, 6])
    np.testing.assert_array_equal(lin.children, [[0, 0], [0, 0], [0, 0], [0, 0], [2, 3], [1, 4]])
    np.testing.assert_array_equal(lin.words, [0, 7, 5, 6, 0, 0])
    np.testing.assert_array_equal(lin.node_slots, [2, 3, 1, 4, 5])   # node order: a, b, c, (a b), root
    np.testing.assert_array_equal(want.node_slots, [1, 2, 3, 4, 5])  # post-order: c, a, b, (a b), root
    np.testing.assert_array_equal(lin.tree_sizes, [5])


@pytest.mark.parametrize("pad", [1, 3])
def test_sst_forest_equals_the_node_path_exactly(pad):
    trees, vocab = ct.data.sst_sample()
    parents, words = to_forest(trees)
    lin = linearize_parents(parents, words, 2, pad=pad, vocab_size=len(vocab))
    # post-order input: node order is the Node path's order, so node_slots agree too
    assert_same_layout(lin, linearize(trees, 2, pad=pad, vocab_size=len(vocab)), SHARED + ("node_slots",))
    assert_same_layout(lin, linearize(ct.data.from_parents(parents, words), 2, pad=pad, vocab_size=len(vocab)),
                       SHARED + ("node_slots",))


def test_sst_forest_shuffled_ids():
    trees, vocab = ct.data.sst_sample()
    parents, words, new_id = to_forest(trees[:300], np.random.default_rng(1))
    lin = linearize_parents(parents, words, 2, pad=2)
    want = linearize(trees[:300], 2, pad=2)
    assert_same_layout(lin, want)
    np.testing.assert_array_equal(lin.node_slots[new_id], want.node_slots)
    assert_node_slots(lin, parents, words)


def test_200_random_forests_agree_with_the_node_path():
    rng = np.random.default_rng(2024)
    for case in range(200):
        count = int(rng.integers(1, 9))
        trees = ct.data.random_trees(count, (1, int(rng.integers(1, 25))), seed=case, vocab_size=50)
        pad, batching = int(rng.integers(1, 5)), bool(rng.integers(0, 4))
        if case % 2:
            parents, words, new_id = to_forest(trees, rng)
        else:
            parents, words = to_forest(trees)
            new_id = np.arange(len(parents))
        if case % 3 == 0:       # arbitrary ids: children order and roots' order follow the ids
            parents, words = _relabel_freely(parents, words, rng)
            trees = ct.data.from_parents(parents, words)
            new_id = None
        kwargs = dict(pad=pad, batching=batching, vocab_size=50)
        lin = linearize_parents(parents, words, 2, **kwargs)
        assert_same_layout(lin, linearize(ct.data.from_parents(parents, words), 2, **kwargs))
        if new_id is not None:
            np.testing.assert_array_equal(lin.node_slots[new_id], linearize(trees, 2, **kwargs).node_slots)
        assert_node_slots(lin, parents, words)


def _relabel_freely(parents, words, rng):
    """Any renumbering (children and roots may change order: from_parents defines the trees)."""
    new_id = rng.permutation(len(parents))
    out = np.full(len(parents), -1)
    out[new_id] = np.where(parents >= 0, new_id[np.maximum(parents, 0)], -1)
    out_words = np.empty_like(words)
    out_words[new_id] = words
    return out, out_words


def test_wide_trees_inner_words_and_no_word():
    """Nodes of up to 4 children with words on inner nodes (dependency trees), no_word set."""
    rng = np.random.default_rng(7)
    for case in range(60):
        n = int(rng.integers(1, 40))
        parents = np.full(n, -1)
        for i in range(1, n):         # attach to an earlier node with fewer than 4 children, or a new root
            free = [p for p in range(i) if np.count_nonzero(parents == p) < 4]
            parents[i] = rng.choice(free) if free and rng.random() < 0.9 else -1
        parents, _ = _relabel_freely(parents, np.zeros(n, int), rng)
        words = rng.integers(0, 30, n)
        inner = np.bincount(parents[parents >= 0], minlength=n) > 0
        words[inner & (rng.random(n) < 0.5)] = -1
        kwargs = dict(pad=int(rng.integers(1, 4)), vocab_size=30, no_word=30)
        lin = linearize_parents(parents, words, 4, **kwargs)
        assert_same_layout(lin, linearize(ct.data.from_parents(parents, words), 4, **kwargs))
        assert_node_slots(lin, parents, words, no_word=30)


def test_a_chain_and_a_single_leaf():
    n = 300                                           # node i's parent is i + 1: one level per node
    parents = np.append(np.arange(1, n), -1)
    words = np.full(n, -1)
    words[0] = 3
    lin = linearize_parents(parents, words, 1, no_word=9)
    assert_same_layout(lin, linearize(ct.data.from_parents(parents, words), 1, no_word=9))
    assert lin.num_levels == n
    lin = linearize_parents([-1], [4], 2)
    np.testing.assert_array_equal(lin.words, [0, 4])
    np.testing.assert_array_equal(lin.roots, [1])


def test_unrolled_layout_falls_back_to_the_node_path():
    trees = ct.data.random_trees(20, (1, 30), seed=3)
    parents, words, new_id = to_forest(trees, np.random.default_rng(3))
    lin = linearize_parents(parents, words, 2, unroll=(2, 2), pad=2)
    want = linearize(trees, 2, unroll=(2, 2), pad=2)
    assert_same_layout(lin, want)
    np.testing.assert_array_equal(lin.node_slots[new_id], want.node_slots)


def test_torch_and_list_inputs():
    parents, words = [2, 2, -1], [4, 7, -1]
    want = linearize_parents(np.array(parents), np.array(words), 2)
    assert_same_layout(linearize_parents(parents, words, 2), want, SHARED + ("node_slots",))
    torch = pytest.importorskip("torch")
    assert_same_layout(linearize_parents(torch.tensor(parents), torch.tensor(words), 2), want,
                       SHARED + ("node_slots",))
    assert_same_layout(linearize_parents(np.array(parents, np.int8), np.array(words, np.int16), 2), want)
    with pytest.raises(ValueError, match=r"parents\[2\] = 4294967295: node 2.s parent is not one of the 3"):
        linearize_parents(np.array(parents).astype(np.uint32), words, 2)   # -1 wrapped around


# ---------------------------------------------------------------- validation

@pytest.mark.parametrize("parents, words, kwargs, message", [
    ([[2, 2, -1]], [4, 7, -1], {}, r"parents must be a 1-D integer array, got int64 of shape \(1, 3\)"),
    ([2.0, 2.0, -1.0], [4, 7, -1], {}, r"parents must be a 1-D integer array, got float64"),
    ([True, False], [4, 7], {}, r"parents must be a 1-D integer array, got bool"),
    ([2, 2, -1], [4.0, 7.0, -1.0], {}, r"words must be a 1-D integer array"),
    ([2, 5, -1], [4, 7, -1], {}, r"parents\[1\] = 5: node 1's parent is not one of the 3 nodes \(-1 marks a root\)"),
    ([2, -3, -1], [4, 7, -1], {}, r"parents\[1\] = -3: node 1's parent is not one of the 3 nodes"),
    ([3, 4, 3, 2, -1], [4, 7, -1, -1, -1], {},
     r"node 2 is its own ancestor: the parents form a cycle through nodes \[2, 3\]"),
    ([-1, 1], [4, 7], {}, r"node 1 is its own ancestor"),
    ([1, 0], [-1, -1], {}, r"node 0 is its own ancestor: the parents form a cycle through nodes \[0, 1\]"),
    ([3, 3, 3, -1], [1, 2, 3, -1], {}, r"node 3 has 3 children, more than max_children=2"),
    ([2, 2, -1, 2], [1, 2, -1, 5], {}, r"node 2 has 3 children, more than max_children=2"),
    ([2, 2, -1], [4, -1, -1], {}, r"node 1 is a leaf without a word \(every leaf needs one\)"),
    ([2, 2, -1], [4, 10, -1], {"vocab_size": 10}, r"node 1: word id 10 is outside the vocabulary \(vocab_size=10\)"),
    ([2, 2, -1], [4, 1 << 31, -1], {}, r"node 1: word id 2147483648 is outside the vocabulary \(word ids must"),
    ([2, 2, -1], [4, 5, 6], {}, r"node 2 has both a word and children, but this model reads words only at leaves"),
    ([2, 2, -1], [4, 5], {}, r"words has 2 entries for 3 nodes"),
    ([], [], {}, r"empty batch"),
    (np.array([], np.int64), np.array([], np.int64), {}, r"empty batch: parents has no nodes"),
])
def test_errors_name_the_node(parents, words, kwargs, message):
    with pytest.raises(ValueError, match=message):
        linearize_parents(parents, words, 2, **kwargs)


def test_argument_errors():
    with pytest.raises(TypeError, match="max_children must be an int"):
        linearize_parents([-1], [1], "2")
    with pytest.raises(ValueError, match="pad must be >= 1"):
        linearize_parents([-1], [1], 2, pad=0)
    with pytest.raises(ValueError, match="no_word must be None or an int"):
        linearize_parents([-1], [1], 2, no_word=-1)
    # an inner word is fine once the model has a no-word marker
    lin = linearize_parents([2, 2, -1], [4, 5, 6], 2, no_word=9)
    np.testing.assert_array_equal(lin.words, [0, 4, 5, 6])


# ---------------------------------------------------------------- compiled(parents=..., words=...)

@pytest.fixture(scope="module")
def sst():
    return ct.data.sst_sample()


@pytest.fixture(scope="module", params=["TreeLSTM", "TreeFC"])
def compiled(request, sst):
    _, vocab = sst
    return compile_padded(getattr(ct.models, request.param)(hidden_size=16, vocab_size=len(vocab)))


def test_compiled_parents_equal_compiled_trees(compiled, sst):
    trees = sst[0][:120]
    assert compiled.plan.node_tile > 1          # levels padded to whole node tiles
    parents, words, new_id = to_forest(trees, np.random.default_rng(5))
    want = compiled(trees)
    np.testing.assert_array_equal(compiled(parents=parents, words=words), want)
    lin = compiled.linearize_parents(parents, words)
    assert_same_layout(lin, compiled.linearize(trees))
    assert (lin.level_sizes % compiled.plan.node_tile == 0).all()
    # every node: one array in the caller's node order
    every = compiled(parents=parents, words=words, all_nodes=True)
    assert every.shape == (len(parents), 16)
    np.testing.assert_array_equal(every[new_id], np.concatenate(compiled(trees, all_nodes=True)))
    np.testing.assert_array_equal(every[parents < 0], want)


def test_compiled_call_takes_exactly_one_input(compiled, sst):
    parents, words = to_forest(sst[0][:2])
    for kwargs in ({}, {"trees": sst[0][:2], "parents": parents, "words": words}, {"words": words}):
        with pytest.raises(ValueError, match="exactly one of the two"):
            compiled(**kwargs)
    with pytest.raises(ValueError, match="node 1 is a leaf without a word"):
        compiled(parents=[2, 2, -1], words=[3, -1, -1])
    with pytest.raises(ValueError, match=f"word id {len(sst[1])} is outside the vocabulary"):
        compiled(parents=[2, 2, -1], words=[3, len(sst[1]), -1])


def test_a_dag_model_refuses_parent_arrays():
    compiled = ct.models.DAGRNN(hidden_size=8, vocab_size=10).compile()
    with pytest.raises(ValueError, match="a parent array describes a forest"):
        compiled(parents=[2, 2, -1], words=[1, 2, -1])


def test_an_unrolled_kernel_takes_parent_arrays(sst):
    trees, vocab = sst
    compiled = ct.models.TreeFC(hidden_size=16, vocab_size=len(vocab)).compile(max_unroll_depth=2)
    assert compiled.plan.unroll is not None
    parents, words, new_id = to_forest(trees[:60], np.random.default_rng(6))
    np.testing.assert_array_equal(compiled(parents=parents, words=words), compiled(trees[:60]))
    every = compiled(parents=parents, words=words, all_nodes=True)
    np.testing.assert_array_equal(every[new_id], np.concatenate(compiled(trees[:60], all_nodes=True)))


@pytest.mark.parametrize("own_forward", [True, False])
def test_vjp_takes_a_forest_as_arrays(sst, own_forward, monkeypatch):
    """compiled.vjp(parents=, words=) gives what vjp(trees) gives for the same forest: the roots,
    every node in the caller's order, and the gradients (the compiled pass's own forward, and
    the kernel's)."""
    trees, vocab = sst[0][:9], sst[1]
    compiled = ct.models.TreeLSTM(hidden_size=16, vocab_size=len(vocab), seed=3).compile(training=True)
    monkeypatch.setattr(compiled.adjoint.level_pass, "forward_pays", lambda lin: own_forward)
    parents, words, new_id = to_forest(trees, np.random.default_rng(7))
    rng = np.random.default_rng(2)
    out, pullback = compiled.vjp(trees)
    d_roots = rng.standard_normal(out.shape).astype(np.float32)
    want = pullback(d_roots)
    out_arrays, pullback_arrays = compiled.vjp(parents=parents, words=words)
    np.testing.assert_allclose(out_arrays, out, rtol=1e-6, atol=1e-6)
    got = pullback_arrays(d_roots)
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-6, err_msg=name)
    # every node: one array in the caller's node order, its adjoint likewise
    every, pullback_every = compiled.vjp(parents=parents, words=words, all_nodes=True)
    by_tree, pullback_by_tree = compiled.vjp(trees, all_nodes=True)
    assert every.shape == (len(parents), 16)
    np.testing.assert_allclose(every[new_id], np.concatenate(by_tree), rtol=1e-6, atol=1e-6)
    d_nodes = rng.standard_normal(every.shape).astype(np.float32)
    got, want = pullback_every(d_nodes), pullback_by_tree(d_nodes[new_id])
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-6, err_msg=name)
    with pytest.raises(ValueError, match="exactly one of the two"):
        compiled.vjp(trees, parents=parents, words=words)
    with pytest.raises(ValueError, match="outside the vocabulary|vocab"):
        compiled.vjp(parents=parents, words=np.where(words >= 0, len(vocab), -1))
