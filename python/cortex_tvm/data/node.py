"""The ``Node`` type and the traversals every other module builds on.

A tree is a graph of :class:`Node` objects.  A node holds a word id, an
ordered non-empty list of children, or both (a dependency tree puts a word on
every node); a leaf is a node without children, and it must have a word.
Nodes stay mutable, but every mutation bumps a module-global *epoch* counter
(see :func:`current_epoch`).  ``cortex_tvm.linearize`` caches a flattened form
of each tree on its root node and trusts that cache only while the epoch is
unchanged, so edits made through the public API can never leave a stale cache
behind.

Nothing here recurses in Python: trees thousands of levels deep are fine.
"""

from __future__ import annotations

from typing import Optional, Union

import numpy as np

__all__ = ["Node", "current_epoch", "postorder", "dag_postorder"]

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
    """One tree node: ``Node(word=3)``, ``Node(children=[a, b])`` or ``Node(word=5, children=[a])``.

    At least one of ``word`` and ``children`` must be given; a node without
    children is a leaf and needs a word.  A model reads x = emb[word] at every
    node that has a word and x = 0 where it has none (models that read words
    only at leaves reject words on inner nodes).  ``label`` is an optional int
    or str annotation (a sentiment class, a phrase or POS tag).

    ``node.word`` and ``node.children`` can be reassigned independently:
    ``node.children = None`` makes the node a leaf (it must have a word) and
    ``node.word = None`` removes the word (it must have children).  Every
    such change, and every in-place edit of ``node.children``, bumps the epoch.
    """

    __slots__ = ("_word", "_children", "label", "_flat")

    def __init__(self, word=None, children=None, label: Optional[Union[int, str]] = None):
        if word is None and children is None:
            raise ValueError("a Node needs a word=, children=, or both (a leaf needs a word)")
        if label is not None and not (_is_int(label) or isinstance(label, str)):
            raise TypeError(f"label must be an int, a str or None, got {type(label).__name__}")
        self._word = None if word is None else self._validated_word(word)
        self._children = None if children is None else self._validated_children(children)
        self.label = label if label is None or isinstance(label, str) else int(label)
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
        """The node's word id, or None for a node without a word (an inner node)."""
        return self._word

    @word.setter
    def word(self, word) -> None:
        if word is None:
            if self._children is None:
                raise ValueError("a leaf must keep its word; assign children first")
            self._word = None
        else:
            self._word = self._validated_word(word)
        _bump_epoch()

    @property
    def children(self) -> Optional[list]:
        """The child list (mutable, epoch-tracked), None for a leaf."""
        return self._children

    @children.setter
    def children(self, children) -> None:
        if children is None:
            if self._word is None:
                raise ValueError("a node without a word needs children; assign a word first")
            self._children = None
        else:
            self._children = self._validated_children(children)
        _bump_epoch()

    @property
    def is_leaf(self) -> bool:
        """True for a node without children."""
        return self._children is None

    def __repr__(self) -> str:
        parts = []
        if self._word is not None:
            parts.append(f"word={self._word}")
        if self._children is not None:
            parts.append(f"children={len(self._children)}")
        if self.label is not None:
            parts.append(f"label={self.label!r}")
        return f"Node({', '.join(parts)})"


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
