"""Bad trees and batches: every one is refused before a kernel runs, the model still works after
one, an edited tree is recomputed; and the test oracle agrees with the package's own executor."""
import numpy as np
import pytest

from cortex_tvm.data import Node

import reference as ref
from zoo_checks import TOL, check_roots


def test_node_needs_a_word_or_children():
    assert Node(word=1, children=[Node(word=2)]).word == 1      # a word on an inner node is allowed
    with pytest.raises(ValueError, match="needs a word=, children=, or both"):
        Node()
    with pytest.raises(ValueError, match="empty"):
        Node(children=[])
    with pytest.raises(TypeError, match="word"):
        Node(word="cat")
    with pytest.raises(TypeError, match="Node"):
        Node(children=[Node(word=1), 3])


@pytest.fixture
def no_kernel(monkeypatch):
    """Fail the test if a kernel runs: bad input must be rejected before any kernel call."""
    def install(compiled):
        def forbidden(*args):
            raise AssertionError("the kernel ran on bad input")
        assert compiled._functions and all(callable(f) for f in compiled._functions)
        monkeypatch.setattr(compiled, "_functions", [forbidden] * len(compiled._functions))
        return compiled
    return install


def _cycle():
    a = Node(word=1)
    inner = Node(children=[a, Node(word=2)])
    root = Node(children=[inner, Node(word=3)])
    inner.children[0] = root          # root -> inner -> root
    return root


def _shared():
    shared = Node(children=[Node(word=1), Node(word=2)])
    return Node(children=[shared, shared])


def _shared_leaf():
    leaf = Node(word=4)
    return Node(children=[Node(children=[leaf, Node(word=5)]), leaf])


def _self_loop():
    n = Node(children=[Node(word=1), Node(word=2)])
    n.children[1] = n
    return n


def _bad_batches(V):
    three = Node(children=[Node(word=1), Node(word=2), Node(word=3)])
    deep_three = Node(children=[Node(word=0), Node(children=[Node(word=1), Node(word=2), Node(word=3)])])
    return [
        ("three children", [three], ValueError, "children"),
        ("three children deep", [Node(word=1), deep_three], ValueError, "children"),
        ("cycle", [_cycle()], ValueError, "cycle"),
        ("self loop", [_self_loop()], ValueError, "cycle"),
        ("shared subtree", [_shared()], ValueError, "shared"),
        ("shared leaf", [_shared_leaf()], ValueError, "shared"),
        ("empty batch", [], ValueError, "empty"),
        ("negative word", [Node(children=[Node(word=-1), Node(word=2)])], ValueError, "vocabulary"),
        ("word == vocab size", [Node(children=[Node(word=1), Node(word=V)])], ValueError, "vocabulary"),
        ("huge word", [Node(word=2 ** 40)], ValueError, "vocabulary"),
        ("not a node", [Node(word=1), "tree"], TypeError, "Node"),
        ("single node, not a list", Node(word=1), TypeError, "list"),
        ("none", None, TypeError, "list"),
    ]


@pytest.mark.parametrize("case", _bad_batches(5374), ids=lambda c: c[0])
def test_bad_batches_raise_before_kernel(zoo, no_kernel, case, sst):
    _, trees, exc, match = case
    assert zoo.vocab_size == len(sst[1]) == 5374
    compiled = no_kernel(zoo.compiled)
    with pytest.raises(exc, match=match):
        compiled(trees)
    with pytest.raises(exc, match=match):
        compiled(trees, all_nodes=True)


def test_model_still_works_after_bad_input(zoo, sst):
    trees = sst[0][:8]
    good = zoo.compiled(trees)
    for bad in ([_cycle()], [_shared()], [], [Node(word=-3)]):
        with pytest.raises(ValueError):
            zoo.compiled(bad)
    np.testing.assert_array_equal(zoo.compiled(trees), good)


def test_edited_tree_is_recomputed(zoo):
    """A tree edited after a call must not use a stale cached layout."""
    left = Node(word=1)
    tree = Node(children=[left, Node(word=2)])
    zoo.compiled([tree])
    left.word = 3
    check_roots(zoo, [tree])
    tree.children.append(Node(word=4))
    with pytest.raises(ValueError, match="children"):
        zoo.compiled([tree])
    tree.children.pop()
    tree.children[1] = Node(children=[Node(word=5), Node(word=6)])
    check_roots(zoo, [tree])


def test_reference_agrees_on_package_executor(zoo, sst):
    """Sanity of the test oracle itself: the package's numpy executor agrees with it too."""
    trees = sst[0][:50]
    np.testing.assert_allclose(zoo.model.reference(trees), ref.roots(zoo.name, trees, zoo.weights),
                               atol=TOL, rtol=0)
