"""Tests for cortex_tvm.linearize: exact layouts, invariants, validation, caching."""

import numpy as np
import pytest

from cortex_tvm.data import Node, chain_tree, postorder, random_trees, sst_sample
from cortex_tvm.linearize import NULL_SLOT, Linearized, linearize


def leaves(*words):
    return [Node(word=w) for w in words]


def three_leaf_tree():
    """((5 6) 7): post-order a=5, b=6, (ab), c=7, root."""
    a, b, c = leaves(5, 6, 7)
    return Node(children=[Node(children=[a, b]), c])


def assert_arrays(lin, **expected):
    for name, value in expected.items():
        got = getattr(lin, name)
        assert got.dtype == np.int32, name
        np.testing.assert_array_equal(got, np.array(value, dtype=np.int32), err_msg=name)


# ---------------------------------------------------------------- exact layouts

def test_three_leaf_tree_pad1():
    lin = linearize([three_leaf_tree()], max_children=2)
    assert isinstance(lin, Linearized)
    # slots: 0 null | leaves a=1 b=2 c=3 | (ab)=4 | root=5
    assert_arrays(
        lin,
        level_offsets=[1, 4, 5, 6],
        children=[[0, 0], [0, 0], [0, 0], [0, 0], [1, 2], [4, 3]],
        num_children=[0, 0, 0, 0, 2, 2],
        words=[0, 5, 6, 7, 0, 0],
        roots=[5],
        node_slots=[1, 2, 4, 3, 5],  # post-order: a, b, (ab), c, root
        tree_sizes=[5],
    )
    assert (lin.num_slots, lin.num_levels, lin.max_level_size) == (6, 3, 3)
    np.testing.assert_array_equal(lin.level_sizes, [3, 1, 1])


def test_two_tree_batch_pad3():
    lin = linearize([three_leaf_tree(), Node(word=9)], max_children=2, pad=3)
    # leaves a=1 b=2 c=3 nine=4 pad 5,6 | (ab)=7 pad 8,9 | root=10 pad 11,12
    assert_arrays(
        lin,
        level_offsets=[1, 7, 10, 13],
        children=[[0, 0]] * 7 + [[1, 2], [0, 0], [0, 0], [7, 3], [0, 0], [0, 0]],
        num_children=[0] * 7 + [2, 0, 0, 2, 0, 0],
        words=[0, 5, 6, 7, 9] + [0] * 8,
        roots=[10, 4],
        node_slots=[1, 2, 7, 3, 10, 4],
        tree_sizes=[5, 1],
    )
    assert lin.max_level_size == 6


def test_two_tree_batch_pad1_keeps_batch_then_postorder_within_level():
    second = Node(children=leaves(1, 2))
    lin = linearize([three_leaf_tree(), second], max_children=2)
    # leaves 5,6,7 then 1,2 | (ab)=6, second root=7 | first root=8
    assert_arrays(
        lin,
        level_offsets=[1, 6, 8, 9],
        children=[[0, 0]] * 6 + [[1, 2], [4, 5], [6, 3]],
        words=[0, 5, 6, 7, 1, 2, 0, 0, 0],
        roots=[8, 7],
        node_slots=[1, 2, 6, 3, 8, 4, 5, 7],
        tree_sizes=[5, 3],
    )


def test_missing_children_point_at_null_slot():
    a, b = leaves(1, 2)
    root = Node(children=[Node(children=[a]), b])  # a unary node
    lin = linearize([root], max_children=3)
    assert_arrays(
        lin,
        level_offsets=[1, 3, 4, 5],
        children=[[0, 0, 0], [0, 0, 0], [0, 0, 0], [1, 0, 0], [3, 2, 0]],
        num_children=[0, 0, 0, 1, 2],
        words=[0, 1, 2, 0, 0],
    )


def test_single_leaf_and_width_change_on_cached_tree():
    leaf = Node(word=4)
    assert_arrays(linearize([leaf], 1), level_offsets=[1, 2], children=[[0], [0]], roots=[1])
    tree = three_leaf_tree()
    narrow = linearize([tree], 2)
    wide = linearize([tree], 4)  # re-pads the cached child rows
    np.testing.assert_array_equal(wide.children[:, :2], narrow.children)
    assert not wide.children[:, 2:].any()
    np.testing.assert_array_equal(linearize([tree], 2).children, narrow.children)


# ---------------------------------------------------------------- invariants

def check_invariants(trees, lin, pad):
    level_of_slot = np.zeros(lin.num_slots, dtype=int) - 1
    for level in range(lin.num_levels):
        lo, hi = lin.level_offsets[level], lin.level_offsets[level + 1]
        assert (hi - lo) % pad == 0
        level_of_slot[lo:hi] = level
    assert lin.level_offsets[0] == 1
    # every real child is on a lower level than its parent
    for k in range(lin.children.shape[1]):
        real = lin.children[:, k] != NULL_SLOT
        assert (level_of_slot[lin.children[real, k]] < level_of_slot[real]).all()
    # node_slots is a permutation of the non-pad slots
    assert len(set(lin.node_slots.tolist())) == len(lin.node_slots) == lin.tree_sizes.sum()
    is_real = np.zeros(lin.num_slots, dtype=bool)
    is_real[lin.node_slots] = True
    assert not is_real[0]
    pad_rows = ~is_real
    assert not lin.children[pad_rows].any() and not lin.words[pad_rows].any()
    assert not lin.num_children[pad_rows].any()
    # per tree: roots, words, child structure
    starts = np.concatenate([[0], np.cumsum(lin.tree_sizes)])
    for i, tree in enumerate(trees):
        nodes = postorder(tree)
        slots = lin.node_slots[starts[i]:starts[i + 1]]
        assert len(nodes) == len(slots) and lin.roots[i] == slots[-1]
        slot_of = {id(n): s for n, s in zip(nodes, slots)}
        for node, slot in zip(nodes, slots):
            if node.children is None:
                assert lin.words[slot] == node.word and lin.num_children[slot] == 0
            else:
                kids = [slot_of[id(c)] for c in node.children]
                assert lin.children[slot, :len(kids)].tolist() == kids
                assert lin.num_children[slot] == len(kids)


@pytest.mark.parametrize("pad", [1, 4, 32])
def test_sst_batches_invariants(pad):
    trees, vocab = sst_sample()
    for start in range(0, 200, 10):
        batch = trees[start:start + 10]
        check_invariants(batch, linearize(batch, 2, pad=pad, vocab_size=len(vocab)), pad)


def test_random_ternary_trees_invariants():
    a, b, c, d = leaves(1, 2, 3, 4)
    ternary = Node(children=[Node(children=[a, b, c]), d])
    batch = random_trees(5, (1, 20), seed=1) + [ternary]
    check_invariants(batch, linearize(batch, 3, pad=2), pad=2)


def test_chain_tree_5000():
    tree = chain_tree(5000)
    lin = linearize([tree], 2)
    assert lin.num_levels == 5001 and lin.num_slots == 1 + 2 * 5000 + 1
    assert lin.roots[0] == lin.num_slots - 1
    check_invariants([tree], lin, 1)


def test_node_shared_between_trees_is_fine():
    shared = Node(children=leaves(1, 2))
    first = Node(children=[shared, Node(word=3)])
    second = Node(children=[Node(word=4), shared])
    batch = [first, second, first, shared]
    lin = linearize(batch, 2)
    check_invariants(batch, lin, 1)
    assert lin.tree_sizes.tolist() == [5, 5, 5, 3]


# ---------------------------------------------------------------- bad input

def test_bad_batches():
    with pytest.raises(ValueError, match="empty batch"):
        linearize([], 2)
    with pytest.raises(TypeError, match="tree 1 is a str"):
        linearize([Node(word=1), "tree"], 2)
    with pytest.raises(TypeError, match="list or tuple"):
        linearize(Node(word=1), 2)
    with pytest.raises(ValueError, match="pad"):
        linearize([Node(word=1)], 2, pad=0)
    with pytest.raises(TypeError, match="max_children"):
        linearize([Node(word=1)], 2.0)


def test_cycle_is_rejected_with_tree_index():
    root = three_leaf_tree()
    root.children[0].children.append(root)
    with pytest.raises(ValueError, match="tree 1: .*cycle"):
        linearize([Node(word=0), root], 3)
    selfloop = Node(children=leaves(1))
    selfloop.children[0] = selfloop
    with pytest.raises(ValueError, match="tree 0: .*cycle"):
        linearize([selfloop], 2)


def test_shared_subtree_inside_one_tree_is_rejected():
    sub = Node(children=leaves(1, 2))
    with pytest.raises(ValueError, match="tree 2: .*shared"):
        linearize([Node(word=0), Node(word=0), Node(children=[sub, sub])], 2)
    leaf = Node(word=1)
    with pytest.raises(ValueError, match="tree 0: .*shared"):
        linearize([Node(children=[Node(children=[leaf]), leaf])], 2)


def test_too_many_children():
    wide = Node(children=leaves(1, 2, 3))
    with pytest.raises(ValueError, match=r"tree 1: .*3 children.*max_children=2"):
        linearize([Node(word=0), wide], 2)


def test_words_outside_vocabulary():
    with pytest.raises(ValueError, match=r"tree 1: word id 10 .*vocabulary"):
        linearize([Node(word=9), Node(children=leaves(1, 10))], 2, vocab_size=10)
    with pytest.raises(ValueError, match=r"tree 0: word id -3 .*vocabulary"):
        linearize([Node(children=leaves(1, -3))], 2)
    linearize([Node(word=9)], 2, vocab_size=10)


def test_emptied_children_list_is_rejected():
    root = three_leaf_tree()
    root.children[0].children.clear()
    with pytest.raises(ValueError, match="tree 0: .*empty children"):
        linearize([root], 2)


# ---------------------------------------------------------------- caching

def test_cache_is_reused_and_invalidated_by_mutation():
    root = three_leaf_tree()
    linearize([root], 2)
    cached = root._flat
    linearize([root], 2)
    assert root._flat is cached  # reused while nothing changed

    root.children[1].word = 42  # change a word
    lin = linearize([root], 2)
    assert lin.words.tolist() == [0, 5, 6, 42, 0, 0]

    root.children.append(Node(word=8))  # change the shape
    lin = linearize([root], 3)
    assert lin.tree_sizes.tolist() == [6] and lin.children[-1].tolist() == [5, 3, 4]

    root.children.append(root)
    with pytest.raises(ValueError, match="cycle"):
        linearize([root], 4)
    root.children.pop()
    assert linearize([root], 3).tree_sizes.tolist() == [6]


def test_mutating_another_tree_invalidates_too():
    # The epoch is global: any edit anywhere makes every cache re-checked.
    tree = three_leaf_tree()
    linearize([tree], 2)
    stamp = tree._flat.epoch
    Node(children=leaves(1)).children.append(Node(word=2))
    linearize([tree], 2)
    assert tree._flat.epoch > stamp


def test_outputs_are_contiguous_int32():
    trees, _ = sst_sample()
    for lin in (linearize(trees[:10], 2), linearize([chain_tree(3000)], 2, pad=8)):
        for name in ("level_offsets", "children", "num_children", "words", "roots",
                     "node_slots", "tree_sizes"):
            array = getattr(lin, name)
            assert array.dtype == np.int32 and array.flags["C_CONTIGUOUS"], name


def test_parent_slots_invert_the_trees_own_edges():
    """Each node's parent slot, checked against the Node objects (postorder: node_slots' order)."""
    trees = sst_sample()[0][:12]
    lin = linearize(trees, max_children=2, pad=3)
    parents = lin.parent_slots()
    slot_of = {}
    for node, slot in zip([n for tree in trees for n in postorder(tree)], lin.node_slots):
        slot_of[id(node)] = int(slot)
    expected = np.full(lin.num_slots, NULL_SLOT, np.int32)
    for tree in trees:
        for node in postorder(tree):
            for child in node.children or ():
                expected[slot_of[id(child)]] = slot_of[id(node)]
    assert parents.dtype == np.int32 and parents.shape == (lin.num_slots,)
    np.testing.assert_array_equal(parents, expected)
    assert (parents[lin.roots] == NULL_SLOT).all()


def test_parent_slots_refuse_a_node_with_two_parents():
    shared = Node(word=1)
    dag = Node(children=[shared, shared])
    lin = linearize([dag], max_children=2, allow_shared=True)
    with pytest.raises(ValueError, match="2 parents"):
        lin.parent_slots()
