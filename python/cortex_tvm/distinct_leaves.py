"""Leaves that read the same word compute the same states: a layout that lists each word's
first leaf before the leaves that repeat it, so a pass over the leaves can run on the distinct
words alone (the compiled training pass, `adjoint_kernel.level_pass`).

An SST batch of 25 trees has about 480 leaves and 290 distinct words; a TreeLSTM's leaves
are 40% of its FLOPs at x = 300, h = 150.  The layout only reorders level 0: each leaf keeps
its own slot (its own states and its own adjoint, which the loss may touch at every node), and
`leaf_sources` names, for each repeat, the slot of the leaf it copies in the forward and adds
its adjoint into in the backward.

Example: leaves with words [7, 3, 7, 7, 3, 9] in slots 1..6 become [7, 3, 9, 7, 7, 3] (slots
1, 2, 3 computed), with leaf_sources [1, 1, 2]: slots 4 and 5 repeat slot 1's word, 6 slot 2's.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np


def repeats_last(words: np.ndarray) -> tuple:
    """(order, sources, distinct) for leaves reading `words`, in slot order: `order`, the leaves'
    positions with each word's first leaf first, in slot order, then every leaf that repeats an
    earlier one's word, in slot order; `sources`, for each repeat (order's tail), the position
    of its word's first leaf; `distinct`, the words once each, sorted.  order and sources are
    None where no word repeats.  Both layouts use it: `linearize.lay_out_levels` as it sorts the
    nodes into slots, `distinct_leaves_first` on a layout already made.

    Example: words [7, 3, 7, 7, 3, 9] -> order [0, 1, 5, 2, 3, 4], sources [0, 0, 1], distinct [3, 7, 9]."""
    distinct, first_of_word, word_of_leaf = np.unique(words, return_index=True, return_inverse=True)
    if len(first_of_word) == len(words):
        return None, None, distinct
    is_first = np.zeros(len(words), bool)
    is_first[first_of_word] = True
    order = np.concatenate((np.flatnonzero(is_first), np.flatnonzero(~is_first)))
    return order, first_of_word[word_of_leaf[order[len(first_of_word):]]], distinct


def distinct_leaves_first(lin):
    """`lin` (a `linearize.Linearized`: that module imports this one, for `repeats_last`) with
    level 0 reordered: the first leaf of each word, in slot order, then every
    leaf that repeats an earlier one's word, in slot order, `leaf_sources` naming the slot of
    the first leaf of its word.  Every other level, and what each node computes, stay as they
    are: children, roots and node_slots follow the leaves to their new slots.  Returns `lin`
    itself when no word repeats.  (A layout made so at once, cheaper: `linearize(...,
    distinct_leaves=True)`, the training pass's, `Adjoint.lay_out`.)"""
    first, end = int(lin.level_offsets[0]), int(lin.level_offsets[1])
    order, sources, distinct = repeats_last(lin.words[first:end])
    if order is None:
        return lin
    new_slot = np.arange(lin.num_slots, dtype=np.int32)                             # old slot -> new
    new_slot[first + order] = np.arange(first, end, dtype=np.int32)
    by_slot = np.arange(lin.num_slots)                                               # new slot -> old
    by_slot[first:end] = first + order
    # (slot 0, the null node that missing children point at, keeps its place)
    return replace(
        lin,
        children=new_slot.take(lin.children.take(by_slot, axis=0)),
        num_children=lin.num_children.take(by_slot),
        words=lin.words.take(by_slot),
        roots=new_slot.take(lin.roots),
        node_slots=new_slot.take(lin.node_slots),
        features=None if lin.features is None else lin.features.take(by_slot, axis=0),
        leaf_sources=new_slot.take(first + sources).astype(np.int32),
        leaf_words=distinct,
    )


def distinct_leaf_count(lin) -> int:
    """The leaves a pass over the distinct words runs on: level 0 but its repeats."""
    repeats = 0 if lin.leaf_sources is None else len(lin.leaf_sources)
    return int(lin.level_offsets[1] - lin.level_offsets[0]) - repeats
