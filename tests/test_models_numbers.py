"""Compiled zoo models vs an independent float64 numpy reference (tests/reference.py): the SST
trees, random and edge-shaped batches, every node's states, repeated and concurrent calls.  Every
model is compiled once (see conftest)."""
import threading

import numpy as np
import pytest

import cortex_tvm as ct
from cortex_tvm.data import Node, chain_tree, postorder, random_trees

import reference as ref
from zoo_checks import assert_close, check_roots, sst_reference


@pytest.mark.parametrize("batch", [10, 64])
def test_sst_dev_all_trees(zoo, sst, batch):
    trees, _ = sst
    want = sst_reference(zoo, trees)
    got = np.concatenate([zoo.compiled(trees[i:i + batch]) for i in range(0, len(trees), batch)])
    assert_close(got, want)


def test_sst_one_big_batch(zoo, sst):
    trees, _ = sst
    assert_close(zoo.compiled(trees), sst_reference(zoo, trees))


def test_schedule_none_gives_same_numbers(zoo, zoo_none, sst):
    assert zoo.name == zoo_none.name
    trees = sst[0][:200]
    a, b = zoo.compiled(trees), zoo_none.compiled(trees)
    assert zoo_none.compiled.recipe_name == "none"
    np.testing.assert_allclose(a, b, atol=1e-5, rtol=0)
    assert_close(b, ref.roots(zoo.name, trees, zoo.weights))


def test_default_recipe_and_plan(zoo):
    """schedule=None derives the schedule from the program and the CPU (no hand recipe is the default)."""
    defaults = [r.name for r in ct.recipes.shipped().values()
                if r.default and r.model == zoo.name and r.target == "llvm"]
    assert defaults == []
    assert zoo.compiled.recipe_name == "derived"
    assert isinstance(zoo.compiled.plan, ct.schedule.RuntimePlan)
    assert isinstance(zoo.compiled.lowered, ct.lower.Lowered)
    assert not zoo.compiled.plan.per_level and len(zoo.compiled._functions) == 1


def test_random_trees(zoo):
    trees = random_trees(40, (1, 60), seed=3, vocab_size=zoo.vocab_size)
    check_roots(zoo, trees)


def test_single_leaf_tree(zoo):
    got = check_roots(zoo, [Node(word=7)])
    assert got.shape == (1, 32)


def test_batch_of_single_leaves(zoo):
    check_roots(zoo, [Node(word=w) for w in (0, 1, zoo.vocab_size - 1, 5)])


def test_batch_of_one(zoo, sst):
    tree = max(sst[0], key=lambda t: len(postorder(t)))
    check_roots(zoo, [tree])


def test_tuple_batch(zoo, sst):
    trees = tuple(sst[0][:5])
    assert_close(zoo.compiled(trees), ref.roots(zoo.name, trees, zoo.weights))


def test_numpy_int_word_ids(zoo):
    tree = Node(children=[Node(word=np.int64(3)), Node(word=np.int32(4))])
    check_roots(zoo, [tree])


def test_deep_chain_5000(zoo):
    tree = chain_tree(5000, seed=1, vocab_size=zoo.vocab_size)
    per_tree = zoo.compiled([tree], all_nodes=True)
    want = ref.all_h(zoo.name, [tree], zoo.weights)
    assert len(per_tree) == 1 and per_tree[0].shape == (10001, 32)
    assert_close(per_tree[0], want[0])
    assert_close(zoo.compiled([tree]), want[0][-1:])


def test_deep_chain_mixed_with_shallow_trees(zoo):
    trees = [Node(word=2), chain_tree(300, seed=2, vocab_size=zoo.vocab_size), Node(word=9)]
    trees += random_trees(5, (2, 10), seed=4, vocab_size=zoo.vocab_size)
    check_roots(zoo, trees)


def test_unary_internal_node(zoo):
    leaf = Node(word=11)
    unary = Node(children=[leaf])
    trees = [
        unary,                                                          # root with one child
        Node(children=[Node(children=[Node(word=3)]), Node(word=4)]),   # unary on the left
        Node(children=[Node(word=5), Node(children=[Node(word=6)])]),   # unary on the right
        Node(children=[Node(children=[Node(children=[Node(word=8)])])]),  # a unary chain
    ]
    check_roots(zoo, trees)
    # and a unary node is not the same as its child
    got = zoo.compiled([unary, Node(word=11)])
    assert np.max(np.abs(got[0] - got[1])) > 1e-3


def test_all_nodes_postorder(zoo, sst):
    trees = sst[0][:30] + [Node(word=1), Node(children=[Node(word=2)])]
    trees += random_trees(10, (1, 25), seed=5, vocab_size=zoo.vocab_size)
    per_tree = zoo.compiled(trees, all_nodes=True)
    want = ref.all_h(zoo.name, trees, zoo.weights)
    assert isinstance(per_tree, list) and len(per_tree) == len(trees)
    for tree, got, w in zip(trees, per_tree, want):
        assert got.shape == (len(postorder(tree)), 32)
        assert_close(got, w)
    # the last row of each tree is its root, as returned without all_nodes
    roots = zoo.compiled(trees)
    np.testing.assert_array_equal(np.stack([g[-1] for g in per_tree]), roots)


def test_same_tree_twice_in_batch(zoo, sst):
    tree = sst[0][17]
    other = sst[0][3]
    got = zoo.compiled([tree, other, tree])
    np.testing.assert_array_equal(got[0], got[2])
    assert_close(got, ref.roots(zoo.name, [tree, other, tree], zoo.weights))
    per_tree = zoo.compiled([tree, tree], all_nodes=True)
    np.testing.assert_array_equal(per_tree[0], per_tree[1])


def test_repeated_calls_identical(zoo, sst):
    trees = sst[0][:50]
    first = zoo.compiled(trees)
    # a bigger batch, a deep one and a tiny one in between reuse / grow the state buffers
    zoo.compiled(sst[0][:400])
    zoo.compiled([chain_tree(50, vocab_size=zoo.vocab_size)])
    zoo.compiled([Node(word=0)])
    second = zoo.compiled(trees)
    np.testing.assert_array_equal(first, second)
    assert first is not second
    first[:] = 0          # the result is the caller's: mutating it changes nothing
    np.testing.assert_array_equal(zoo.compiled(trees), second)


def test_all_nodes_results_are_not_aliased_to_buffers(zoo, sst):
    trees = sst[0][:5]
    a = zoo.compiled(trees, all_nodes=True)
    saved = [x.copy() for x in a]
    zoo.compiled(sst[0][100:200])
    for x, y in zip(a, saved):
        np.testing.assert_array_equal(x, y)


def test_threads_share_one_compiled_model(zoo, sst):
    batches = [sst[0][i * 20:(i + 1) * 20] for i in range(4)]
    want = [zoo.compiled(b) for b in batches]
    got, errors = [None] * 4, []

    def work(i):
        try:
            for _ in range(3):
                got[i] = zoo.compiled(batches[i])
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
