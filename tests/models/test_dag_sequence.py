"""DAG linearization (allow_shared), the DAG spec, and the grid / sequence builders (no compiling)."""
import numpy as np
import pytest

import cortex_tvm as ct
from cortex_tvm.data import Node, dag_postorder, grid_dag, sequence, sequence_positions, sequences
from cortex_tvm.linearize import NULL_SLOT, linearize


def test_grid_dag_shape_and_sharing():
    sink, nodes = grid_dag(3, 4, seed=0, return_nodes=True)
    assert sink is nodes[2][3] and nodes[0][0].is_leaf
    assert nodes[1][1].children == [nodes[0][1], nodes[1][0]]              # up, then left
    assert all(n.word is not None for n in dag_postorder(sink))              # a word on every node
    assert len(dag_postorder(sink)) == 12                                    # no input carriers
    lin = linearize([sink], 2, allow_shared=True, no_word=100)
    assert lin.num_slots == 1 + 12 and lin.num_levels == 3 + 4 - 1          # levels = anti-diagonals
    words = {lin.node_slots[p]: n.word for p, n in enumerate(dag_postorder(sink))}
    assert all(lin.words[slot] == w for slot, w in words.items())
    # node (1, 1) is computed once: its slot is a child of both (2, 1) and (1, 2)
    order = dag_postorder(sink)
    slot = {id(n): lin.node_slots[p] for p, n in enumerate(order)}
    s11 = slot[id(nodes[1][1])]
    assert s11 in lin.children[slot[id(nodes[2][1])]] and s11 in lin.children[slot[id(nodes[1][2])]]
    assert (lin.children == s11).sum() == 2


def test_tree_mode_still_rejects_shared_even_after_dag_mode():
    sink = grid_dag(2, 2)
    linearize([sink], 2, allow_shared=True, no_word=100)     # caches the DAG's flat form
    with pytest.raises(ValueError, match="shared"):
        linearize([sink], 2, no_word=100)
    with pytest.raises(ValueError, match="reads words only at leaves"):
        linearize([sink], 2, allow_shared=True)


def test_cycle_rejected_in_both_modes():
    a = Node(word=1)
    b = Node(children=[Node(word=2), a])
    a.children = [Node(word=3), b]
    for shared in (False, True):
        with pytest.raises(ValueError, match="cycle"):
            linearize([b], 2, allow_shared=shared)
    with pytest.raises(ValueError, match="cycle"):
        dag_postorder(b)


def test_dag_errors_name_the_structure():
    with pytest.raises(ValueError, match="tree 1: .*more than max_children=1"):
        linearize([grid_dag(1, 1), grid_dag(2, 2)], 1, allow_shared=True, no_word=100)
    with pytest.raises(ValueError, match="tree 0: word id 7 is outside the vocabulary"):
        linearize([grid_dag(1, 2, words=np.array([[0, 7]]))], 2, allow_shared=True, vocab_size=5, no_word=5)


def test_trees_identical_in_both_modes():
    trees = ct.data.random_trees(20, (1, 30), seed=4)
    a = linearize(trees, 2)
    b = linearize([ct.data.random_trees(20, (1, 30), seed=4)[i] for i in range(20)], 2, allow_shared=True)
    for field in ("level_offsets", "children", "num_children", "words", "roots", "node_slots", "tree_sizes"):
        np.testing.assert_array_equal(getattr(a, field), getattr(b, field))


def test_same_child_twice_and_padding():
    src = Node(word=3)
    top = Node(children=[Node(word=4), src, src])
    lin = linearize([top], 3, allow_shared=True, pad=4)
    row = lin.children[lin.roots[0]]
    assert row[1] == row[2] != NULL_SLOT and lin.tree_sizes.tolist() == [3]
    assert all(size % 4 == 0 for size in lin.level_sizes)


def test_dag_spec():
    spec = ct.models.DAG(max_children=3)
    assert isinstance(spec, ct.ra.Tree) and spec.kind == "dag" and spec.max_children == 3
    assert ct.models.DAGRNN(8, 10).program.spec.kind == "dag"


def test_sequence_chain_levels_are_positions():
    seqs = sequences([[1, 2, 3, 4], [5], [6, 7]])
    lin = linearize(seqs, 1, no_word=10)
    assert lin.num_levels == 4
    assert np.diff(lin.level_offsets).tolist() == [3, 2, 1, 1]         # level t: the elements t+1, no carriers
    assert lin.words[lin.level_offsets[0]:lin.level_offsets[1]].tolist() == [1, 5, 6]
    assert lin.words[lin.level_offsets[1]:lin.level_offsets[2]].tolist() == [2, 7]
    s = sequence([9, 8, 7])
    assert [n.word for n in ct.data.postorder(s)] == [9, 8, 7]
    assert s.word == 7 and s.children[0].word == 8 and s.children[0].children[0].word == 9
    order = ct.data.postorder(s)
    assert sequence_positions(3).tolist() == [0, 1, 2]
    assert [order[p] for p in sequence_positions(3)][-1] is s


def test_sequence_validation_and_depth():
    with pytest.raises(ValueError, match="at least one word"):
        sequence([])
    with pytest.raises(TypeError, match="ints"):
        sequence([1, "a"])
    deep = sequence(list(range(3000)))
    assert linearize([deep], 1, no_word=3000).num_levels == 3000
