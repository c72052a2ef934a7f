"""Synthetic structures: random binary trees, deep chains, sequences and image-grid DAGs.

Sequences and DAGs put a word on every node (``Node(word=w, children=[...])``):
an element's input is its own word, its children are its predecessors.
"""

from __future__ import annotations

from typing import Sequence, Union

import numpy as np

from .node import Node, _is_int, postorder
from .ptb import sst_sample

__all__ = ["random_trees", "treebank_like", "chain_tree", "sequence", "sequences", "sequence_positions", "grid_dag"]


def _check_positive_int(name: str, value, minimum: int) -> int:
    if not _is_int(value):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return int(value)


def random_trees(count: int, leaves: Union[int, Sequence[int]], seed: int = 0,
                 vocab_size: int = 100) -> list:
    """``count`` random binary trees with random shapes and uniform word ids.

    ``leaves`` is a leaf count or an inclusive ``(lo, hi)`` range.  Each tree is
    built by repeatedly merging two random adjacent subtrees.  Deterministic
    for a given seed.
    """
    count = _check_positive_int("count", count, 0)
    vocab_size = _check_positive_int("vocab_size", vocab_size, 1)
    if _is_int(leaves):
        lo = hi = _check_positive_int("leaves", leaves, 1)
    else:
        if not isinstance(leaves, (list, tuple)) or len(leaves) != 2:
            raise TypeError("leaves must be an int or an inclusive (lo, hi) pair")
        lo = _check_positive_int("leaves lo", leaves[0], 1)
        hi = _check_positive_int("leaves hi", leaves[1], 1)
        if lo > hi:
            raise ValueError(f"leaves range ({lo}, {hi}) is empty")
    rng = np.random.default_rng(seed)
    trees = []
    for _ in range(count):
        n = int(rng.integers(lo, hi + 1))
        items = [Node(word=int(w)) for w in rng.integers(0, vocab_size, n)]
        for r in rng.random(n - 1):
            i = int(r * (len(items) - 1))  # merge items[i] and items[i + 1]
            items[i:i + 2] = [Node(children=[items[i], items[i + 1]])]
        trees.append(items[0])
    return trees


def treebank_like(count: int, seed: int = 0, vocab_size: int = 100, right_merge: float = 0.4) -> list:
    """``count`` random binary trees shaped like treebank parses, not copies of any.

    Leaf counts are drawn from the bundled SST dev trees' (mean 19, 5-95% 6-35).  Each tree
    merges adjacent subtrees as `random_trees` does, but with probability `right_merge` the
    two rightmost, which gives parse trees' right-branching depth: mean height 9.6 (5-95%
    4-17) against SST dev's 9.9 (4-16) at the default.  Deterministic for a given seed.
    """
    count = _check_positive_int("count", count, 0)
    vocab_size = _check_positive_int("vocab_size", vocab_size, 1)
    if not 0.0 <= right_merge <= 1.0:
        raise ValueError(f"right_merge must be in [0, 1], got {right_merge}")
    sst, _ = sst_sample()
    leaf_counts = [sum(1 for n in postorder(t) if n.is_leaf) for t in sst]
    rng = np.random.default_rng(seed)
    trees = []
    for n in rng.choice(leaf_counts, count):
        items = [Node(word=int(w)) for w in rng.integers(0, vocab_size, int(n))]
        while len(items) > 1:
            i = len(items) - 2 if rng.random() < right_merge else int(rng.random() * (len(items) - 1))
            items[i:i + 2] = [Node(children=[items[i], items[i + 1]])]
        trees.append(items[0])
    return trees


def chain_tree(depth: int, seed: int = 0, vocab_size: int = 100) -> Node:
    """A left-leaning binary tree whose root has height ``depth``.

    Every internal node is ``(previous subtree, new leaf)``, so there are
    ``depth + 1`` leaves and ``2 * depth + 1`` nodes.
    """
    depth = _check_positive_int("depth", depth, 0)
    vocab_size = _check_positive_int("vocab_size", vocab_size, 1)
    words = np.random.default_rng(seed).integers(0, vocab_size, depth + 1)
    tree = Node(word=int(words[0]))
    for w in words[1:]:
        tree = Node(children=[tree, Node(word=int(w))])
    return tree


def _check_words(name, words) -> list:
    words = list(words)
    if not words:
        raise ValueError(f"{name}: a sequence needs at least one word")
    for w in words:
        if not _is_int(w):
            raise TypeError(f"{name}: word ids must be ints, got {type(w).__name__}")
    return [int(w) for w in words]


def sequence(words) -> Node:
    """A sequence x_1..x_T as a chain: returns the node of the last element.

    Element 1 is ``Node(word=x_1)``; element t > 1 is
    ``Node(word=x_t, children=[element t-1])``, so element t sits at level
    t - 1 and a batch of sequences of different lengths is batched by
    position.  Built iteratively (any length).  Use ``max_children=1``.
    """
    words = _check_words("sequence", words)
    node = Node(word=words[0])
    for w in words[1:]:
        node = Node(word=w, children=[node])
    return node


def sequences(batch) -> list:
    """:func:`sequence` for each word list of ``batch`` (lengths may differ)."""
    return [sequence(words) for words in batch]


def sequence_positions(length: int) -> np.ndarray:
    """Indices of the elements 1..T in ``postorder`` of a :func:`sequence` of ``length``
    words, for ``compiled(seqs, all_nodes=True)``: the postorder is the elements in order,
    so this is ``arange(length)``."""
    length = _check_positive_int("length", length, 1)
    return np.arange(length, dtype=np.int64)


def grid_dag(rows: int, cols: int, words=None, seed: int = 0, vocab_size: int = 100,
             return_nodes: bool = False):
    """A 2-D image-grid DAG: node (i, j) has predecessors (i-1, j) and (i, j-1).

    Node (0, 0) is the leaf ``Node(word=w)``; every other node is
    ``Node(word=w, children=[up, left])`` (the predecessors that exist, up
    first), so interior nodes are shared by two parents.  Use ``max_children=2``.  ``words`` is an int
    (rows, cols) array, random in [0, vocab_size) when None.  Returns the
    sink (rows-1, cols-1), or ``(sink, nodes)`` with ``nodes[i][j]`` the grid
    node when ``return_nodes``.
    """
    rows = _check_positive_int("rows", rows, 1)
    cols = _check_positive_int("cols", cols, 1)
    if words is None:
        vocab_size = _check_positive_int("vocab_size", vocab_size, 1)
        words = np.random.default_rng(seed).integers(0, vocab_size, (rows, cols))
    words = np.asarray(words)
    if words.shape != (rows, cols) or not np.issubdtype(words.dtype, np.integer):
        raise ValueError(f"grid_dag: words must be an int array of shape ({rows}, {cols}), "
                         f"got {words.dtype} {words.shape}")
    nodes = [[None] * cols for _ in range(rows)]
    for i in range(rows):
        for j in range(cols):
            w = int(words[i, j])
            preds = ([nodes[i - 1][j]] if i else []) + ([nodes[i][j - 1]] if j else [])
            nodes[i][j] = Node(word=w, children=preds) if preds else Node(word=w)
    sink = nodes[rows - 1][cols - 1]
    return (sink, nodes) if return_nodes else sink


def fold_words(tree: Node, vocab_size: int) -> Node:
    """A copy of `tree` with every word id taken modulo `vocab_size` (the same shape, so a large
    treebank's structures can feed a model with a small vocabulary)."""
    vocab_size = _check_positive_int("vocab_size", vocab_size, 1)
    made = {}
    for n in postorder(tree):
        word = None if n.word is None else n.word % vocab_size
        made[id(n)] = Node(word=word) if n.is_leaf else Node(word=word, children=[made[id(c)] for c in n.children])
    return made[id(tree)]

