"""A forest given as arrays -> ``Linearized``, in numpy alone: no ``Node`` objects.

    lin = linearize_parents(parents, words, max_children=2)   # parents[i]: node i's parent, -1 at a root

The result equals ``linearize(data.from_parents(parents, words), max_children, ...)``
array for array (the same levels, slots, children, words and roots), except
``node_slots``: here ``node_slots[i]`` is the slot of node i, in the caller's
order.  ``tree_sizes`` counts each tree's nodes, trees in the order their roots
appear in ``parents``.

How: this module builds the node-order arrays that ``linearize`` gets from
``flatten`` (trees in the order of their roots, each in post-order, children in
increasing index order) and hands them to ``linearize.lay_out_levels``, the one
layout code.  Heights come from peeling the leaves round by round (a node's
height is one more than the round in which its last child was peeled), subtree
sizes on the way up; post-order positions from the sizes on the way down.  Each
round is a few numpy calls over that level's nodes: the cost is one pass per
level, never Python per node (a chain of n nodes still takes n rounds).
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from .data import from_parents
from .flatten import NO_CHILD, NO_WORD
from .linearize import INNER_WORDS, Linearized, _one_node_per_level, check_sizes, lay_out_levels, linearize

__all__ = ["linearize_parents"]


def _int_array(name: str, values) -> np.ndarray:
    array = np.asarray(values)
    if array.ndim != 1 or (array.dtype.kind not in "iu" and array.size):   # [] is an empty batch
        raise ValueError(f"{name} must be a 1-D integer array, got {array.dtype} of shape {array.shape}")
    if array.dtype.kind == "u":       # in int64 (a value past its range is out of range anyway)
        array = np.minimum(array.astype(np.uint64), np.uint64(np.iinfo(np.int64).max)).astype(np.int64)
    return array


def _first(mask: np.ndarray) -> int:
    """The first True's index, or -1 (argmax: far cheaper than any() on small arrays)."""
    i = int(mask.argmax())
    return i if mask[i] else -1


def _peel(up_of: np.ndarray, num_children: np.ndarray):
    """Heights and subtree sizes by peeling leaves round by round, and each round's nodes (for
    the way down).  up_of: each node's parent, the sink n at a root (never peeled).
    ValueError naming a node on a cycle (never peeled)."""
    n = len(num_children)
    pending = np.append(num_children, n + 1)
    sizes = np.ones(n + 1, np.int64)
    mark = np.empty(n + 1, np.int64)
    rounds = []
    frontier = (num_children == 0).nonzero()[0]
    peeled = 0
    while frontier.size:
        rounds.append(frontier)
        peeled += frontier.size
        up = up_of[frontier]
        np.add.at(sizes, up, sizes[frontier])
        np.subtract.at(pending, up, 1)
        ready = up[pending[up] == 0]        # a parent once per child peeled now: keep one of each
        index = np.arange(ready.size)
        mark[ready] = index                 # whichever duplicate's write wins, exactly one matches
        frontier = ready[mark[ready] == index]
    if peeled < n:
        stuck = np.ones(n, bool)
        for peel in rounds:
            stuck[peel] = False
        stuck = stuck.nonzero()[0]
        raise ValueError(f"node {int(stuck[0])} is its own ancestor: the parents form a cycle through "
                         f"nodes {stuck[:8].tolist()}{' ...' if stuck.size > 8 else ''}")
    heights = np.empty(n, np.int64)
    heights[np.concatenate(rounds)] = np.arange(len(rounds)).repeat([r.size for r in rounds])
    return heights, sizes, rounds


def _check_words(words: np.ndarray, num_children: np.ndarray, vocab_size, no_word) -> None:
    leaf = num_children == 0
    i = _first(leaf & (words < 0))
    if i >= 0:
        raise ValueError(f"node {i} is a leaf without a word (every leaf needs one)")
    i = _first(words >= (1 << 31 if vocab_size is None else min(vocab_size, 1 << 31)))
    if i >= 0:
        raise ValueError(f"node {i}: word id {int(words[i])} is outside the vocabulary "
                         f"({'word ids must fit int32' if vocab_size is None else f'vocab_size={vocab_size}'})")
    i = -1 if no_word is not None else _first(~leaf & (words >= 0))
    if i >= 0:
        raise ValueError(f"node {i} has both a word and children, {INNER_WORDS}")


def forest_order(parents, words, max_children: int, vocab_size=None, no_word=None):
    """Validate the forest and lay it out in node order: (post, heights, table, root_index,
    tree_sizes), where post[i] is node i's node-order position and heights/table are as
    ``lay_out_levels`` takes them.  ValueError naming the node for every fault."""
    parents = _int_array("parents", parents)
    n = parents.shape[0]
    if n == 0:
        raise ValueError("empty batch: parents has no nodes (a batch needs at least one root)")
    words = _int_array("words", words)
    if words.shape[0] != n:
        raise ValueError(f"words has {words.shape[0]} entries for {n} nodes")
    i = _first((parents < -1) | (parents >= n))
    if i >= 0:
        raise ValueError(f"parents[{i}] = {int(parents[i])}: node {i}'s parent is not one of the {n} "
                         "nodes (-1 marks a root)")
    # the roots hang under a sink, node n: they are its children, in order, like any node's
    up_of = parents.astype(np.intp)
    up_of[up_of < 0] = n
    counts = np.bincount(up_of, minlength=n + 1)
    num_children = counts[:n]
    i = _first(num_children > max_children)
    if i >= 0:
        raise ValueError(f"node {i} has {int(num_children[i])} children, more than max_children={max_children}")
    heights, sizes, rounds = _peel(up_of, num_children)
    _check_words(words, num_children, vocab_size, no_word)

    # Children grouped by parent, in increasing index order (the roots last): each one's rank
    # among its siblings and the sizes of the siblings before it (where its subtree starts in
    # its parent's, or for a root, its tree in the batch).
    grouped = up_of.argsort(kind="stable")
    first = (counts.cumsum() - counts)[up_of[grouped]]          # the group's first position
    before = sizes[grouped].cumsum()
    before -= sizes[grouped]
    rank = np.empty(n, np.int64)
    offset = np.empty(n + 1, np.int64)
    rank[grouped] = np.arange(n) - first
    offset[grouped] = before - before[first]
    # Post-order start of each subtree, top-down (parents are higher, so come first).
    start = offset                                              # the sink starts at 0
    start[n] = 0
    for level in reversed(rounds):
        start[level] += start[up_of[level]]
    post = start[:n] + sizes[:n] - 1
    roots = grouped[n - counts[n]:]
    tree_sizes = sizes[roots]

    table = np.full((2 + max_children, n + 1), NO_CHILD, np.int32)
    table[0, post] = np.where(words < 0, NO_WORD, words)
    table[1, post] = num_children
    table[:2, n] = 0
    children = grouped[:n - counts[n]]
    parent_post = post[up_of[children]]
    table[2 + rank[children], parent_post] = post[children] - parent_post
    ordered = np.empty(n, np.uint16 if len(rounds) <= 1 << 16 else np.int32)
    ordered[post] = heights
    return post, ordered, table, post[roots], tree_sizes


def linearize_parents(parents, words, max_children: int, *, pad: int = 1, vocab_size=None,
                      batching: bool = True, no_word=None, unroll: tuple | None = None,
                      distinct_leaves: bool = False) -> Linearized:
    """Lay out the forest whose node i has parent ``parents[i]`` (-1 at a root) and word
    ``words[i]`` (-1, or any negative, where it has none), as ``linearize`` lays out
    ``data.from_parents(parents, words)``; see the module doc.

    Several roots are several trees, in the order the roots appear.  ``pad``,
    ``vocab_size``, ``batching`` and ``no_word`` mean what they mean for ``linearize``.
    ``unroll=(depth, chunks)`` (recursive unrolling) validates here, then lays the trees out
    through ``data.from_parents`` and ``linearize``; ``node_slots`` still follows node order.
    ``distinct_leaves``: as ``linearize``'s (not with unroll).
    Raises ValueError naming the node: parents not a 1-D integer array, a parent out of
    range, a cycle, too many children, a leaf without a word, a word outside the vocabulary,
    a word on an inner node when ``no_word`` is None, words of the wrong length, no nodes.
    """
    check_sizes(max_children, pad, vocab_size, no_word)
    post, heights, table, root_index, tree_sizes = forest_order(parents, words, max_children, vocab_size,
                                                                no_word)
    if unroll is not None and tuple(unroll)[:1] != (1,):
        lin = linearize(from_parents(parents, words), max_children, pad=pad, vocab_size=vocab_size,
                        batching=batching, no_word=no_word, unroll=unroll, distinct_leaves=distinct_leaves)
        return replace(lin, node_slots=lin.node_slots.take(post))
    if not batching:
        heights = _one_node_per_level(heights)
    return lay_out_levels(heights, table, root_index, tree_sizes, max_children, pad, no_word,
                          node_order=post, distinct_leaves=distinct_leaves)
