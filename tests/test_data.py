"""Tests for cortex_tvm.data: Node, PTB parsing, bundled SST sample, generators."""

import numpy as np
import pytest

from cortex_tvm import data
from cortex_tvm.data import (Node, chain_tree, current_epoch, load_ptb, parse_ptb,
                             postorder, random_trees, sst_sample)


def shape(tree):
    """(word, number of children) of every node in post-order: identifies a tree."""
    return [(n.word, 0 if n.children is None else len(n.children)) for n in postorder(tree)]


def height(tree):
    """Height of a tree, computed without recursion."""
    heights = {}
    for node in postorder(tree):
        heights[id(node)] = 0 if node.children is None else \
            1 + max(heights[id(c)] for c in node.children)
    return heights[id(tree)]


# ---------------------------------------------------------------- Node

def test_node_leaf_and_internal():
    leaf = Node(word=3, label=2)
    parent = Node(children=[leaf, Node(word=np.int64(4))])
    assert leaf.word == 3 and leaf.children is None and leaf.label == 2 and leaf.is_leaf
    assert parent.word is None and len(parent.children) == 2 and not parent.is_leaf
    assert type(parent.children[1].word) is int
    assert Node(word=-1).word == -1  # checked against the vocabulary later, not here
    assert repr(leaf) == "Node(word=3, label=2)"
    assert repr(parent) == "Node(children=2)"


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(), ValueError, "needs a word=, children=, or both"),
    (dict(children=[]), ValueError, "empty"),
    (dict(children=[Node(word=0), "x"]), TypeError, "child 1 is a str"),
    (dict(children=Node(word=0)), TypeError, "list of Nodes"),
    (dict(word="cat"), TypeError, "word must be an int"),
    (dict(word=1.0), TypeError, "word must be an int"),
    (dict(word=True), TypeError, "word must be an int"),
    (dict(word=1, label=2.5), TypeError, "label"),
    (dict(word=1, label=["NP"]), TypeError, "label"),
])
def test_node_validation(kwargs, error, match):
    with pytest.raises(error, match=match):
        Node(**kwargs)


def test_node_word_and_children_are_independent():
    a, b = Node(word=1), Node(word=2)
    both = Node(word=5, children=[a], label="nsubj")
    assert both.word == 5 and both.children == [a] and not both.is_leaf and both.label == "nsubj"
    assert repr(both) == "Node(word=5, children=1, label='nsubj')"
    node = Node(word=0)
    node.children = (a, b)                        # a leaf gains children and keeps its word
    assert node.word == 0 and list(node.children) == [a, b]
    node.word = None                              # an inner node may drop its word
    assert node.word is None
    with pytest.raises(ValueError, match="needs children"):
        node.children = None                      # ... but then it cannot become a leaf
    node.word = 7
    node.children = None
    assert node.word == 7 and node.children is None and node.is_leaf
    with pytest.raises(ValueError, match="leaf must keep its word"):
        node.word = None
    with pytest.raises(ValueError):
        node.children = []
    with pytest.raises(TypeError):
        node.word = "7"
    parent = Node(children=[a])
    with pytest.raises(TypeError, match="not a Node"):
        parent.children.append(3)
    with pytest.raises(TypeError, match="not a Node"):
        parent.children[0] = None


def test_constructing_nodes_does_not_bump_epoch():
    before = current_epoch()
    Node(children=[Node(word=1), Node(word=2)])
    random_trees(3, 5)
    assert current_epoch() == before


def _mutations():
    """Each entry: a function that edits `root` (children a, b, c) one way."""
    return {
        "append": lambda r, x: r.children.append(x),
        "extend": lambda r, x: r.children.extend([x]),
        "insert": lambda r, x: r.children.insert(0, x),
        "setitem": lambda r, x: r.children.__setitem__(0, x),
        "setslice": lambda r, x: r.children.__setitem__(slice(0, 1), [x]),
        "delitem": lambda r, x: r.children.__delitem__(0),
        "pop": lambda r, x: r.children.pop(),
        "remove": lambda r, x: r.children.remove(r.children[0]),
        "clear": lambda r, x: r.children.clear(),
        "sort": lambda r, x: r.children.sort(key=lambda n: -n.word),
        "reverse": lambda r, x: r.children.reverse(),
        "iadd": lambda r, x: r.children.__iadd__([x]),
        "imul": lambda r, x: r.children.__imul__(1),
        "set children": lambda r, x: setattr(r, "children", [x]),
        "set word (root)": lambda r, x: setattr(r, "word", 9),
        "set word (leaf)": lambda r, x: setattr(r.children[0], "word", 9),
    }


@pytest.mark.parametrize("name", list(_mutations()))
def test_every_mutation_bumps_epoch(name):
    root = Node(children=[Node(word=1), Node(word=2), Node(word=3)])
    extra = Node(word=4)
    before = current_epoch()
    _mutations()[name](root, extra)
    assert current_epoch() > before


def test_augmented_assignment_keeps_tracked_list():
    root = Node(children=[Node(word=1)])
    root.children += [Node(word=2)]
    before = current_epoch()
    root.children.append(Node(word=3))
    assert current_epoch() > before and len(root.children) == 3


# ---------------------------------------------------------------- postorder

def test_postorder_order():
    a, b, c, d = (Node(word=i) for i in range(4))
    ab = Node(children=[a, b])
    root = Node(children=[ab, c, d])
    assert postorder(root) == [a, b, ab, c, d, root]
    assert postorder(a) == [a]


def test_postorder_rejects_repeats():
    leaf = Node(word=0)
    with pytest.raises(ValueError, match="reachable twice"):
        postorder(Node(children=[leaf, leaf]))
    with pytest.raises(TypeError):
        postorder("tree")


# ---------------------------------------------------------------- PTB

def test_parse_ptb_labels_and_vocab_order():
    text = "(3 (2 It) (4 (2 's) (2 fine)))\n\n(1 (2 fine) (0 It))\n"
    trees, vocab = parse_ptb(text)
    assert vocab == {"It": 0, "'s": 1, "fine": 2}
    assert len(trees) == 2
    assert shape(trees[0]) == [(0, 0), (1, 0), (2, 0), (None, 2), (None, 2)]
    assert [n.label for n in postorder(trees[0])] == [2, 2, 2, 4, 3]
    assert shape(trees[1]) == [(2, 0), (0, 0), (None, 2)]


def test_parse_ptb_extends_given_vocab():
    vocab = {"a": 0, "b": 5}
    trees, out = parse_ptb("(1 (2 b) (2 new))", vocab)
    assert out is vocab and vocab == {"a": 0, "b": 5, "new": 6}
    assert shape(trees[0])[:2] == [(5, 0), (6, 0)]


def test_parse_ptb_keeps_nonbreaking_space_inside_token():
    trees, vocab = parse_ptb("(2 (2 a\u00a0b) (2 c))\r\n")
    assert list(vocab) == ["a\u00a0b", "c"]


def test_parse_ptb_single_leaf_tree():
    trees, vocab = parse_ptb("(4 great)")
    assert shape(trees[0]) == [(0, 0)] and trees[0].label == 4


@pytest.mark.parametrize("line, match", [
    ("(2 (2 a) (2 b)", "unbalanced.*missing"),
    ("(2 (2 a) (2 b)))", "unbalanced.*too many"),
    ("(2 (2 a) (2 b)) (2 c)", "after the tree ends"),
    ("(2 a b)", "more than one word"),
    ("(2 a (2 b))", "both a word and subtrees"),
    ("(2 (2 b) a)", "both a word and subtrees"),
    ("(2)", "neither a word nor subtrees"),
    ("a (2 b)", "must start with"),
])
def test_parse_ptb_malformed_names_line(line, match):
    text = "(2 ok)\n\n" + line + "\n"
    with pytest.raises(ValueError, match="line 3: .*" + match):
        parse_ptb(text)


def test_load_ptb_round_trip(tmp_path):
    text = "(3 (2 It) (4 (2 's) (2 fine)))\n(1 (2 caf\u00e9) (0 It))\n"
    path = tmp_path / "trees.txt"
    path.write_text(text, encoding="utf-8")
    loaded, vocab = load_ptb(path)
    parsed, vocab2 = parse_ptb(text)
    assert vocab == vocab2 and "caf\u00e9" in vocab
    assert [shape(t) for t in loaded] == [shape(t) for t in parsed]


def test_sst_sample():
    trees, vocab = sst_sample()
    assert len(trees) == 1101
    for tree in trees:
        nodes = postorder(tree)
        leaves = [n for n in nodes if n.children is None]
        assert all(len(n.children) == 2 for n in nodes if n.children is not None)
        assert len(nodes) == 2 * len(leaves) - 1
        assert all(0 <= n.word < len(vocab) for n in leaves)
    again, vocab2 = sst_sample()
    assert again is not trees and again == trees and vocab2 == vocab and vocab2 is not vocab


# ---------------------------------------------------------------- generators

def test_random_trees_deterministic_and_sized():
    first = random_trees(20, (1, 30), seed=7, vocab_size=10)
    second = random_trees(20, (1, 30), seed=7, vocab_size=10)
    other = random_trees(20, (1, 30), seed=8, vocab_size=10)
    assert [shape(t) for t in first] == [shape(t) for t in second]
    assert [shape(t) for t in first] != [shape(t) for t in other]
    for tree in first:
        leaves = [w for w, k in shape(tree) if k == 0]
        assert 1 <= len(leaves) <= 30 and all(0 <= w < 10 for w in leaves)
        assert all(k in (0, 2) for _, k in shape(tree))
    assert all(sum(k == 0 for _, k in shape(t)) == 12 for t in random_trees(5, 12))
    assert random_trees(0, 3) == []
    with pytest.raises(ValueError, match="empty"):
        random_trees(1, (5, 2))
    with pytest.raises(ValueError, match="leaves"):
        random_trees(1, 0)


def test_chain_tree_is_deep_and_left_leaning():
    tree = chain_tree(5000)
    assert len(postorder(tree)) == 2 * 5000 + 1
    assert height(tree) == 5000
    assert tree.children[1].children is None  # the new leaf is always on the right
    assert shape(chain_tree(0, seed=3)) == shape(chain_tree(0, seed=3))
    assert chain_tree(0).children is None


def test_data_module_has_epoch_counter():
    assert isinstance(data.current_epoch(), int)


def test_treebank_like_trees_have_sst_shapes():
    """Generated cost-model trees: SST dev's leaf counts and about its depth, binary, in the
    vocabulary, deterministic per seed."""
    def height(t):
        return 0 if t.is_leaf else 1 + max(height(c) for c in t.children)
    sst, _ = data.sst_sample()
    trees = data.treebank_like(300, seed=4, vocab_size=50)
    assert len(trees) == 300
    nodes = [n for t in trees for n in data.postorder(t)]
    assert all(n.is_leaf or len(n.children) == 2 for n in nodes)
    assert all(0 <= n.word < 50 for n in nodes if n.is_leaf)
    leaves = [sum(n.is_leaf for n in data.postorder(t)) for t in trees]
    sst_leaves = [sum(n.is_leaf for n in data.postorder(t)) for t in sst]
    assert abs(np.mean(leaves) - np.mean(sst_leaves)) < 2.0                       # 19.3 in SST dev
    assert abs(np.mean([height(t) for t in trees]) - np.mean([height(t) for t in sst])) < 1.5   # 9.9
    again = data.treebank_like(300, seed=4, vocab_size=50)
    assert [data.postorder(t)[0].word for t in again] == [data.postorder(t)[0].word for t in trees]
    with pytest.raises(ValueError, match="right_merge must be in"):
        data.treebank_like(3, right_merge=1.5)
