"""Trees for recursive models: the ``Node`` type, PTB parsing and tree generators.

A tree is a graph of :class:`Node` objects: a leaf holds a word id, an internal
node holds an ordered, non-empty list of child nodes.  Nodes stay mutable, but
every mutation bumps a module-global *epoch* counter (see :func:`current_epoch`).
``cortex_tvm.linearize`` caches a flattened form of each tree on its root node
and trusts that cache only while the epoch is unchanged, so edits made through
the public API can never leave a stale cache behind.

Nothing in this module recurses in Python: trees thousands of levels deep
(e.g. :func:`chain_tree` with depth 5000) are fine.
"""

from __future__ import annotations

import importlib.resources
from typing import Optional, Sequence, Tuple, Union

import numpy as np

__all__ = [
    "Node",
    "current_epoch",
    "postorder",
    "parse_ptb",
    "load_ptb",
    "sst_sample",
    "random_trees",
    "chain_tree",
    "dag_postorder",
    "sequence",
    "sequences",
    "sequence_positions",
    "grid_dag",
]

# Incremented by every mutation of any Node (creating Nodes does not count).
_epoch = 0


def current_epoch() -> int:
    """Return the global mutation counter; it changes whenever any tree is edited."""
    return _epoch


def _bump_epoch() -> None:
    global _epoch
    _epoch += 1


def _is_int(value) -> bool:
    """True for Python and numpy integers, False for bool (a common mistake)."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def _check_children(items) -> None:
    for i, child in enumerate(items):
        if not isinstance(child, Node):
            raise TypeError(f"child {i} is a {type(child).__name__}, not a Node")


class _ChildList(list):
    """A node's child list: a plain ``list`` whose mutating methods bump the epoch.

    Insertions are type-checked so that a non-Node can never get into a tree.
    """

    __slots__ = ()

    def append(self, child):
        _check_children([child])
        _bump_epoch()
        super().append(child)

    def extend(self, items):
        items = list(items)
        _check_children(items)
        _bump_epoch()
        super().extend(items)

    def insert(self, index, child):
        _check_children([child])
        _bump_epoch()
        super().insert(index, child)

    def __setitem__(self, index, value):
        if isinstance(index, slice):
            value = list(value)
            _check_children(value)
        else:
            _check_children([value])
        _bump_epoch()
        super().__setitem__(index, value)

    def __delitem__(self, index):
        _bump_epoch()
        super().__delitem__(index)

    def pop(self, index=-1):
        _bump_epoch()
        return super().pop(index)

    def remove(self, child):
        _bump_epoch()
        super().remove(child)

    def clear(self):
        _bump_epoch()
        super().clear()

    def sort(self, *args, **kwargs):
        _bump_epoch()
        super().sort(*args, **kwargs)

    def reverse(self):
        _bump_epoch()
        super().reverse()

    def __iadd__(self, items):
        items = list(items)
        _check_children(items)
        _bump_epoch()
        return super().__iadd__(items)

    def __imul__(self, count):
        _bump_epoch()
        return super().__imul__(count)


class Node:
    """One tree node: a leaf ``Node(word=3)`` or an internal ``Node(children=[a, b])``.

    Exactly one of ``word`` and ``children`` must be given.  ``label`` is an
    optional integer annotation (e.g. the sentiment class from PTB text).

    Assigning ``node.word = 5`` turns the node into a leaf and assigning
    ``node.children = [...]`` turns it into an internal node; both, and every
    in-place edit of ``node.children``, bump the global epoch.
    """

    __slots__ = ("_word", "_children", "label", "_flat")

    def __init__(self, word=None, children=None, label: Optional[int] = None):
        if (word is None) == (children is None):
            raise ValueError("a Node needs exactly one of word= (leaf) or children= (internal node)")
        if label is not None and not _is_int(label):
            raise TypeError(f"label must be an int or None, got {type(label).__name__}")
        self._word = None if word is None else self._validated_word(word)
        self._children = None if children is None else self._validated_children(children)
        self.label = None if label is None else int(label)
        self._flat = None  # linearize's per-tree cache; only meaningful on roots

    @staticmethod
    def _validated_word(word) -> int:
        if not _is_int(word):
            raise TypeError(f"word must be an int word id, got {type(word).__name__}")
        return int(word)

    @staticmethod
    def _validated_children(children) -> _ChildList:
        if not isinstance(children, (list, tuple)):
            raise TypeError(f"children must be a list of Nodes, got {type(children).__name__}")
        if len(children) == 0:
            raise ValueError("children must not be empty; use Node(word=...) for a leaf")
        _check_children(children)
        return _ChildList(children)

    @property
    def word(self) -> Optional[int]:
        """Word id of a leaf, None for an internal node."""
        return self._word

    @word.setter
    def word(self, word) -> None:
        if word is None:
            raise ValueError("word cannot be set to None; assign children to make an internal node")
        self._word = self._validated_word(word)
        self._children = None
        _bump_epoch()

    @property
    def children(self) -> Optional[list]:
        """The child list of an internal node (mutable, epoch-tracked), None for a leaf."""
        return self._children

    @children.setter
    def children(self, children) -> None:
        if children is None:
            raise ValueError("children cannot be set to None; assign word to make a leaf")
        self._children = self._validated_children(children)
        self._word = None
        _bump_epoch()

    @property
    def is_leaf(self) -> bool:
        return self._children is None

    def __repr__(self) -> str:
        label = "" if self.label is None else f", label={self.label}"
        if self._children is None:
            return f"Node(word={self._word}{label})"
        return f"Node(children={len(self._children)}{label})"


def postorder(tree: Node) -> list:
    """All nodes of ``tree``, children (left to right) before their parent.

    This is the "user order" of a tree's nodes.  Raises ValueError if a node
    is reachable twice (a cycle or a shared subtree).
    """
    if not isinstance(tree, Node):
        raise TypeError(f"postorder expects a Node, got {type(tree).__name__}")
    # Pre-order that visits the right child first, reversed, is post-order
    # with children left to right; this needs no per-node state on the stack.
    seen = set()
    order = []
    stack = [tree]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            raise ValueError(f"{node!r} is reachable twice (a cycle or a shared subtree)")
        seen.add(id(node))
        order.append(node)
        if node._children is not None:
            stack.extend(node._children)
    order.reverse()
    return order


# ----------------------------------------------------------------------------
# PTB bracketed text
# ----------------------------------------------------------------------------

def _tokenize(line: str) -> list:
    # Only ASCII spaces separate tokens: SST words may contain U+00A0.
    return [t for t in line.replace("(", " ( ").replace(")", " ) ").split(" ") if t]


def _parse_line(tokens: list, lineno: int, vocab: dict, next_id: int) -> Tuple[Node, int]:
    """Parse one tree's tokens with an explicit stack; returns (root, next free word id)."""

    def fail(what: str):
        raise ValueError(f"PTB line {lineno}: {what}")

    if not tokens or tokens[0] != "(":
        fail("a tree must start with '('")
    # Each open bracket is a frame [label, word, children].
    stack = []
    root = None
    i, n = 0, len(tokens)
    while i < n:
        tok = tokens[i]
        if root is not None:
            if tok == ")":
                fail("unbalanced parentheses: too many ')'")
            fail(f"unexpected text after the tree ends: {tok!r}")
        if tok == "(":
            if stack and stack[-1][1] is not None:
                fail("a node cannot have both a word and subtrees")
            label_tok = tokens[i + 1] if i + 1 < n else None
            if label_tok is None or label_tok in ("(", ")"):
                fail("missing label after '('")
            if not label_tok.lstrip("-").isdecimal():
                fail(f"missing label after '(': {label_tok!r} is not an integer")
            stack.append([int(label_tok), None, []])
            i += 2
            continue
        if tok == ")":
            if not stack:
                fail("unbalanced parentheses: too many ')'")
            label, word, children = stack.pop()
            if word is not None:
                node = Node(word=word, label=label)
            elif children:
                node = Node(children=children, label=label)
            else:
                fail(f"node with label {label} has neither a word nor subtrees")
            if stack:
                stack[-1][2].append(node)
            else:
                root = node
            i += 1
            continue
        # A word token.
        if not stack:
            fail(f"word {tok!r} outside parentheses")
        frame = stack[-1]
        if frame[1] is not None:
            fail(f"a leaf has more than one word ({tok!r})")
        if frame[2]:
            fail("a node cannot have both a word and subtrees")
        word_id = vocab.get(tok)
        if word_id is None:
            word_id = vocab[tok] = next_id
            next_id += 1
        frame[1] = word_id
        i += 1
    if stack:
        fail("unbalanced parentheses: missing ')'")
    return root, next_id


def parse_ptb(text: str, vocab: Optional[dict] = None) -> Tuple[list, dict]:
    """Parse PTB bracketed trees, one per non-empty line, e.g. ``(3 (2 It) (2 works))``.

    Leaves get word ids from ``vocab`` (str -> int), which is created when None
    and extended in order of first appearance; node labels are kept.
    Returns ``(trees, vocab)``.  Malformed text raises ValueError naming the line.
    """
    if not isinstance(text, str):
        raise TypeError(f"parse_ptb expects str text, got {type(text).__name__}")
    if vocab is None:
        vocab = {}
    next_id = max(vocab.values()) + 1 if vocab else 0
    trees = []
    # Split on '\n' only: str.splitlines would also split on exotic separators.
    for lineno, line in enumerate(text.split("\n"), start=1):
        tokens = _tokenize(line.rstrip("\r"))
        if not tokens:
            continue
        tree, next_id = _parse_line(tokens, lineno, vocab, next_id)
        trees.append(tree)
    return trees, vocab


def load_ptb(path, vocab: Optional[dict] = None) -> Tuple[list, dict]:
    """Read a UTF-8 PTB file (one tree per line); see :func:`parse_ptb`."""
    with open(path, encoding="utf-8") as f:
        return parse_ptb(f.read(), vocab)


_sst_cache: Optional[Tuple[list, dict]] = None


def sst_sample() -> Tuple[list, dict]:
    """The bundled 1101 SST dev trees and their vocabulary, parsed once and cached.

    Returns fresh list/dict objects each call; the Node objects are shared.
    """
    global _sst_cache
    if _sst_cache is None:
        text = importlib.resources.files(__name__).joinpath("sst_dev.txt").read_text(encoding="utf-8")
        _sst_cache = parse_ptb(text)
    trees, vocab = _sst_cache
    return list(trees), dict(vocab)


# ----------------------------------------------------------------------------
# Synthetic trees
# ----------------------------------------------------------------------------

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


# ----------------------------------------------------------------------------
# DAGs and sequences (used by DAGRNN, SeqLSTM, SeqGRU)
# ----------------------------------------------------------------------------
#
# Convention for models whose every node has an input (sequences, DAG-RNN):
# a Node holds a word XOR children, so an element with predecessors reads its
# input through an *input carrier*: its child 0 is a leaf ``Node(word=w)``
# and children 1.. are its predecessors.  An element without predecessors is
# itself the leaf ``Node(word=w)``.  Models read ``word[child(n, 0)]`` at
# internal nodes and ``word[n]`` at leaves.

def dag_postorder(root: Node) -> list:
    """The distinct nodes reachable from ``root``, each once, children before parents.

    Like :func:`postorder` (the same order for a tree), but a node shared by
    several parents (a DAG) is listed once, at its first visit.  Raises
    ValueError for a cycle.  Iterative: deep chains are fine.
    """
    if not isinstance(root, Node):
        raise TypeError(f"dag_postorder expects a Node, got {type(root).__name__}")
    order, done, on_path = [], set(), {id(root)}
    stack = [(root, 0)]
    while stack:
        node, k = stack[-1]
        children = node._children
        if children is not None and k < len(children):
            stack[-1] = (node, k + 1)
            child = children[k]
            key = id(child)
            if key in done:
                continue
            if key in on_path:
                raise ValueError(f"{child!r} is its own descendant (a cycle): "
                                 "a DAG must have no cycles")
            on_path.add(key)
            stack.append((child, 0))
        else:
            stack.pop()
            on_path.discard(id(node))
            done.add(id(node))
            order.append(node)
    return order


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
    ``Node(children=[Node(word=x_t), element t-1])`` (child 0 carries the
    input, child 1 is the predecessor), so element t sits at level t - 1 and
    a batch of sequences of different lengths is batched by position.
    Built iteratively (any length).  Use ``max_children=2``.
    """
    words = _check_words("sequence", words)
    node = Node(word=words[0])
    for w in words[1:]:
        node = Node(children=[Node(word=w), node])
    return node


def sequences(batch) -> list:
    """:func:`sequence` for each word list of ``batch`` (lengths may differ)."""
    return [sequence(words) for words in batch]


def sequence_positions(length: int) -> np.ndarray:
    """Indices of the elements 1..T in ``postorder`` of a :func:`sequence` of ``length``
    words, for ``compiled(seqs, all_nodes=True)``: the postorder lists the input
    carriers of elements T..2 first, then elements 1..T."""
    length = _check_positive_int("length", length, 1)
    return np.arange(length - 1, 2 * length - 1, dtype=np.int64)


def grid_dag(rows: int, cols: int, words=None, seed: int = 0, vocab_size: int = 100,
             return_nodes: bool = False):
    """A 2-D image-grid DAG: node (i, j) has predecessors (i-1, j) and (i, j-1).

    Node (0, 0) is the leaf ``Node(word=w)``; every other node is
    ``Node(children=[Node(word=w), up, left])`` (the predecessors that
    exist, up first; child 0 carries the node's input), so interior nodes are
    shared by two parents.  Use ``max_children=3``.  ``words`` is an int
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
            nodes[i][j] = Node(children=[Node(word=w)] + preds) if preds else Node(word=w)
    sink = nodes[rows - 1][cols - 1]
    return (sink, nodes) if return_nodes else sink
