"""One tree -> its cached post-order arrays: the per-tree half of the linearizer.

``flat_for`` turns one tree into post-order numpy arrays with an iterative
traversal (which also rejects cycles and shared subtrees).  With
``allow_shared=True`` (DAGs) a node reachable from several parents gets one
column, listed as the child of each parent; cycles are still rejected.  The
result is cached on the root node and reused while ``data.current_epoch()``
is unchanged, i.e. while no tree anywhere has been edited.  ``linearize``
concatenates these per batch.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .data import Node, dag_postorder

# ----------------------------------------------------------------------------
# one tree -> cached post-order arrays
# ----------------------------------------------------------------------------
#
# The cache on a root is a _Flat.  Its ``table`` is int32 (2 + width, n), one
# column per node in post-order: row 0 the word (NO_WORD for a node without one), row 1
# the number of children, rows 2.. each child's position *relative to its
# parent* (always negative), or NO_CHILD.  Relative positions stay valid when
# trees are concatenated, so a batch needs no per-tree offset arithmetic; a
# trailing sentinel column makes pad rows and missing children come out as
# NULL_SLOT with one np.minimum (see linearize).

NO_CHILD = 1 << 30  # larger than any batch's node count
NO_WORD = -2        # in a table's word row: a node without a word (user words there are >= -1)


@dataclass(frozen=True, eq=False)
class _Flat:
    epoch: int            # data.current_epoch() when this was computed
    max_children: int     # most children of any node in the tree
    min_word: int         # min / max over the nodes that have a word
    max_word: int
    inner_words: bool     # some node has both a word and children
    heights: np.ndarray   # (n,) uint16, or int32 for trees 65536+ levels high
    table: np.ndarray     # int32 (2 + width, n), width >= max_children
    shared: bool = False  # a node is the child of several parents (only from _flatten_dag)


def _repeat_error(root: Node, tree_index: int) -> ValueError:
    """Explain why a node was reached twice: a cycle, or a shared subtree.

    Runs only on the error path: a DFS with on-path marks, which terminates
    because finished nodes are never entered again.
    """
    on_path, done = set(), set()
    stack = [(root, False)]
    shared = None
    while stack:
        node, leaving = stack.pop()
        if leaving:
            on_path.discard(id(node))
            done.add(id(node))
            continue
        if id(node) in on_path:
            return ValueError(f"tree {tree_index}: {node!r} is its own descendant (a cycle)")
        if id(node) in done:
            shared = shared or node
            continue
        on_path.add(id(node))
        stack.append((node, True))
        if node._children:
            stack.extend((child, False) for child in node._children)
    return ValueError(
        f"tree {tree_index}: {shared!r} is reachable twice (a shared subtree); "
        "within one tree every node must be a distinct object")


def _postorder_nodes(root: Node, tree_index: int) -> list:
    """The tree's nodes in post-order; raises on cycles and shared nodes."""
    # Pre-order that visits the right child first, reversed, is post-order
    # with children left to right.  Repeats are checked in bulk (C speed) at
    # doubling checkpoints, so a cycle is caught after finitely many steps.
    order = []
    stack = [root]
    pop, push, visit = stack.pop, stack.extend, order.append
    checkpoint = 1024
    try:
        while stack:
            node = pop()
            visit(node)
            if node._children is not None:
                push(node._children)
            if len(order) == checkpoint or not stack:
                if len(set(map(id, order))) != len(order):
                    raise _repeat_error(root, tree_index)
                checkpoint *= 2
    except AttributeError:
        raise TypeError(f"tree {tree_index} contains a child that is not a Node") from None
    order.reverse()
    return order


def _node_lists(n):
    """Per-node words, child counts, heights, and relative[j][p] = child j of node p minus p."""
    return [None] * n, [0] * n, [0] * n, []


def _record(p, node, tree_index, words, num_children, relative):
    """Store node p's word and child count (growing `relative` to its arity); its children,
    None for a leaf."""
    if node._word is not None:
        words[p] = node._word
    children = node._children
    if children is None:
        return None
    k = len(children)
    if k == 0:
        raise ValueError(f"tree {tree_index}: {node!r} has an empty children list")
    while len(relative) < k:
        relative.append([NO_CHILD] * len(words))
    num_children[p] = k
    return children


def _flatten(root: Node, tree_index: int, epoch: int) -> _Flat:
    """Compute the cacheable flat form of one tree."""
    order = _postorder_nodes(root, tree_index)
    n = len(order)
    words, num_children, heights, relative = _node_lists(n)
    sizes = [1] * n           # subtree sizes, to locate children by arithmetic
    for p, node in enumerate(order):
        children = _record(p, node, tree_index, words, num_children, relative)
        if children is None:
            continue
        k = len(children)
        # In post-order the last child sits right before its parent and each
        # earlier child right before the subtree of the next one.
        child = p - 1
        height = 0
        for j in range(k - 1, -1, -1):
            relative[j][p] = child - p
            if heights[child] > height:
                height = heights[child]
            child -= sizes[child]
        sizes[p] = p - child
        heights[p] = height + 1
    return _pack_flat(epoch, words, num_children, heights, relative, shared=False)


def _pack_flat(epoch, words, num_children, heights, relative, shared) -> _Flat:
    """The per-node lists of one traversal as a cacheable _Flat (both tree and DAG mode)."""
    n = len(words)
    height_dtype = np.uint16 if max(heights) < 1 << 16 else np.int32  # uint16 sorts faster
    given = [w for w in words if w is not None]       # a leaf always has a word: never empty
    inner_words = len(given) > num_children.count(0)
    min_word, max_word = min(given), max(given)
    # the table holds NO_WORD where a node has no word; a user's word is clipped to
    # [-1, 2**31) there (the true extremes above are what the vocabulary check reads)
    if min_word < 0 or max_word >= 1 << 31:
        words = [NO_WORD if w is None else min(max(w, -1), (1 << 31) - 1) for w in words]
    else:
        words = [NO_WORD if w is None else w for w in words]
    return _Flat(epoch=epoch, max_children=len(relative), min_word=min_word, max_word=max_word,
                 inner_words=inner_words,
                 heights=np.array(heights, dtype=height_dtype),
                 table=np.array([words, num_children] + relative, dtype=np.int32).reshape(-1, n),
                 shared=shared)


def _flatten_dag(root: Node, tree_index: int, epoch: int) -> _Flat:
    """The flat form of a DAG: each distinct node once (see ``data.dag_postorder``)."""
    try:
        order = dag_postorder(root)
    except ValueError as err:
        raise ValueError(f"tree {tree_index}: {err}") from None
    except AttributeError:
        raise TypeError(f"tree {tree_index} contains a child that is not a Node") from None
    n = len(order)
    position = {id(node): p for p, node in enumerate(order)}
    words, num_children, heights, relative = _node_lists(n)
    edges = 0
    for p, node in enumerate(order):
        children = _record(p, node, tree_index, words, num_children, relative)
        if children is None:
            continue
        edges += len(children)
        height = 0
        for j, child in enumerate(children):
            c = position[id(child)]
            relative[j][p] = c - p
            if heights[c] > height:
                height = heights[c]
        heights[p] = height + 1
    return _pack_flat(epoch, words, num_children, heights, relative, shared=edges != n - 1)


def flat_for(tree: Node, tree_index: int, epoch: int, width: int,
              allow_shared: bool = False) -> _Flat:
    """The cached (or fresh) flat form of ``tree`` with exactly ``width`` child rows.

    A tree's flat form is the same either way, so the cache serves both
    modes; only a DAG's (``shared``) is redone, and rejected, in tree mode.
    """
    flat = tree._flat
    if flat is None or flat.epoch != epoch or (flat.shared and not allow_shared):
        flatten = _flatten_dag if allow_shared else _flatten
        flat = tree._flat = flatten(tree, tree_index, epoch)
    if flat.max_children > width:
        raise ValueError(f"tree {tree_index}: a node has {flat.max_children} children, "
                         f"more than max_children={width}")
    if flat.table.shape[0] != 2 + width:
        # Re-pad once and cache it: batches usually reuse the same width.
        table = np.full((2 + width, flat.table.shape[1]), NO_CHILD, dtype=np.int32)
        used = 2 + flat.max_children
        table[:used] = flat.table[:used]
        flat = tree._flat = _Flat(flat.epoch, flat.max_children, flat.min_word, flat.max_word,
                                  flat.inner_words, flat.heights, table, flat.shared)
    return flat
