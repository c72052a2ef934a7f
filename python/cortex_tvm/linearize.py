"""Turn a batch of trees into level-ordered slot arrays for the compiled kernel.

Every node of the batch gets a *slot* (a row of the kernel's state tensor).
Nodes are grouped by level (= height: leaves are level 0, a parent is one more
than its highest child), each level occupies one contiguous slot range, so the
kernel can process a whole level at once.  Slot 0 is a null node whose state
stays zero: missing children and padding rows point at it.

The work is split in two so that the per-batch cost stays tiny:

(a) ``flatten.flat_for`` turns one tree into post-order numpy arrays, cached
    on the root node (a DAG's shared nodes get one column each).
(b) ``linearize`` concatenates those arrays for the batch and does the level
    sort, padding and renumbering with vectorized numpy only
    (``lay_out_levels``, which ``linearize_arrays.linearize_parents`` shares:
    a forest given as parent arrays, laid out without any Node).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .data import Node, _is_int, current_epoch
from .flatten import NO_CHILD as _NO_CHILD
from .flatten import NO_WORD as _NO_WORD
from .flatten import flat_for as _flat_for
from .distinct_leaves import repeats_last
from .unrolled_levels import check_unrolled_children, levels_per_step, unrolled_levels

__all__ = ["NULL_SLOT", "Linearized", "linearize", "check_bounds"]

NULL_SLOT = 0  # slot 0 is a "null node": its state stays zero.
#: the end of the error for a word on an inner node (both linearizers)
INNER_WORDS = ("but this model reads words only at leaves (ChildSumTreeLSTM, TreeLSTM(inner_words=True), "
               "the sequence models and DAGRNN read words on inner nodes)")


@dataclass(frozen=True, eq=False)
class Linearized:
    """A batch of trees laid out in level order (all arrays int32, C-contiguous).

    ``words`` and ``num_children`` are rows of one buffer and ``node_slots``
    is a view; treat all arrays as read-only results.
    """

    level_offsets: np.ndarray  # (L+1,): level l is slots [level_offsets[l], level_offsets[l+1]); [0] == 1
    children: np.ndarray       # (num_slots, max_children): child slots, NULL_SLOT where none
    num_children: np.ndarray   # (num_slots,)
    words: np.ndarray          # (num_slots,): each node's word id; no_word (default 0) where a node has none
    roots: np.ndarray          # (B,): root slot of each tree, in batch order
    node_slots: np.ndarray     # (total nodes,): slot of every node, trees in batch order, each in postorder
    tree_sizes: np.ndarray     # (B,): node count of each tree (splits node_slots)
    #: (num_slots, F) float32 per-node features in slot order (`node_features.slot_rows`), or None
    features: np.ndarray | None = None
    #: (D,) int32, or None: the last D leaves of level 0 repeat the word of a leaf before them,
    #: whose slot each one names (`lay_out_levels(distinct_leaves=True)`, `distinct_leaves_first`;
    #: the backward computes a word's leaf once)
    leaf_sources: np.ndarray | None = None
    #: (W,) the words of level 0 once each, sorted, where the layout lists repeats last (as
    #: leaf_sources), else None: the rows of an embedding's gradient that its leaves can touch
    leaf_words: np.ndarray | None = None

    @property
    def num_slots(self) -> int:
        """Rows of the state tensor, including the null slot and padding."""
        return int(self.level_offsets[-1])

    @property
    def num_levels(self) -> int:
        return len(self.level_offsets) - 1

    @property
    def level_sizes(self) -> np.ndarray:
        """Slots per level, padding included."""
        return np.diff(self.level_offsets)

    @property
    def max_level_size(self) -> int:
        return int(self.level_sizes.max())

    def parent_slots(self) -> np.ndarray:
        """(num_slots,) int32: each slot's parent slot, NULL_SLOT at a root, the null slot and
        padding: the other direction of `children`, for a pass that goes from the roots down
        and gathers from a node's parent rather than scattering into its children.  In a DAG
        layout (`allow_shared=True`) a node can have several parents: a ValueError names one.

        For ``(1 2)`` with leaves at slots 1 and 2 and the root at 3: ``[0, 3, 3, 0]``."""
        parents = np.full(self.num_slots, NULL_SLOT, np.int32)
        rows, _ = np.nonzero(self.children != NULL_SLOT)
        kids = self.children[self.children != NULL_SLOT]
        slots, first, counts = np.unique(kids, return_index=True, return_counts=True)
        if (counts > 1).any():
            shared = int(slots[counts > 1][0])
            raise ValueError(f"slot {shared} has {int(counts[counts > 1][0])} parents (a DAG layout): "
                             "parent_slots gives one parent per slot")
        parents[slots] = rows[first]
        return parents


# ----------------------------------------------------------------------------
# (b) a batch of flat trees -> Linearized
# ----------------------------------------------------------------------------

_sentinel_columns = {}  # width -> the (2 + width, 1) column that pad rows read


def _sentinel_column(width: int) -> np.ndarray:
    column = _sentinel_columns.get(width)
    if column is None:
        column = np.full((2 + width, 1), _NO_CHILD, dtype=np.int32)
        column[:2] = 0  # word 0, no children
        column.flags.writeable = False
        _sentinel_columns[width] = column
    return column


def _check_args(trees, max_children, pad, vocab_size, no_word) -> None:
    if not isinstance(trees, (list, tuple)):
        raise TypeError(f"trees must be a list or tuple of Nodes, got {type(trees).__name__}")
    if len(trees) == 0:
        raise ValueError("empty batch: linearize needs at least one tree")
    check_sizes(max_children, pad, vocab_size, no_word)


def check_sizes(max_children, pad, vocab_size, no_word=None) -> None:
    """TypeError/ValueError unless max_children and pad (and vocab_size, unless None) are ints >= 1
    and no_word is None or an int in [0, 2**31)."""
    if no_word is not None and (not _is_int(no_word) or no_word < 0 or no_word >= 1 << 31):
        raise ValueError(f"no_word must be None or an int in [0, 2**31), got {no_word!r}")
    for name, value in (("max_children", max_children), ("pad", pad), ("vocab_size", vocab_size)):
        if value is None and name == "vocab_size":
            continue
        if not _is_int(value):
            raise TypeError(f"{name} must be an int, got {type(value).__name__}")
        if value < 1:
            raise ValueError(f"{name} must be >= 1, got {value}")


def _one_node_per_level(heights: np.ndarray) -> np.ndarray:
    """Levels without dynamic batching: leaves stay level 0, each internal node gets its own
    level, in height order (so children still come before parents)."""
    levels = np.zeros(len(heights), dtype=np.int32)
    order = heights.argsort(kind="stable")
    internal = order[heights[order] > 0]
    levels[internal] = np.arange(1, len(internal) + 1, dtype=np.int32)
    return levels


def linearize(trees, max_children: int, *, pad: int = 1, vocab_size=None,
              batching: bool = True, allow_shared: bool = False, no_word=None,
              unroll: tuple | None = None, distinct_leaves: bool = False) -> Linearized:
    """Lay out a batch of trees in level order; see :class:`Linearized`.

    Within a level, nodes keep batch order and then post-order; each level's
    slot range is padded with null rows to a multiple of ``pad``.  With
    ``batching=False`` every internal node is a level of its own (no dynamic
    batching; leaves still form level 0).  Raises
    ValueError/TypeError, naming the tree index, for empty batches, non-Nodes,
    cycles, shared subtrees, too many children and out-of-vocabulary words.

    ``allow_shared=True`` accepts DAGs: each "tree" is a sink node, and a node
    reachable through several parents is laid out once (one slot, listed as
    the child of each parent, so its states are computed once); cycles still
    raise ValueError.  ``tree_sizes``/``node_slots`` then count distinct nodes,
    in ``data.dag_postorder`` order.  Nodes shared *between* batch entries are
    laid out once per entry.

    ``no_word`` is for models that read words on inner nodes: ``words`` holds
    it where a node has no word (choose a value outside the vocabulary, e.g.
    ``vocab_size``).  With the default None, a node without a word gets 0 and
    a word on an inner node (a node with children) raises ValueError.

    ``unroll=(depth, chunks)`` lays the batch out for recursive unrolling
    (``unrolled_levels``): levels are (step, chunk, phase) triples, every
    internal node in the step and chunk of its group; a DAG raises ValueError.

    ``distinct_leaves=True`` (pad 1, no unroll) lists each word's first leaf before the leaves
    that repeat its word (``lay_out_levels``): the training pass's layout.
    """
    _check_args(trees, max_children, pad, vocab_size, no_word)
    if unroll is not None and (len(unroll) != 2 or not all(_is_int(v) and v >= 1 for v in unroll)):
        raise ValueError(f"unroll must be (depth, chunks), two positive ints, got {unroll!r}")
    if distinct_leaves and unroll is not None and unroll[0] > 1:
        raise ValueError("distinct_leaves: a layout by level (the training pass's), not an unrolled one")
    epoch = current_epoch()
    heights, tables, tree_sizes, root_index, flats = [], [], [], [], []
    num_nodes = 0
    for i, tree in enumerate(trees):
        if not isinstance(tree, Node):
            raise TypeError(f"tree {i} is a {type(tree).__name__}, not a Node")
        flat = _flat_for(tree, i, epoch, max_children, allow_shared)
        if flat.min_word < 0:
            raise ValueError(f"tree {i}: word id {flat.min_word} is outside the vocabulary "
                             "(word ids must be >= 0)")
        if vocab_size is not None and flat.max_word >= vocab_size:
            raise ValueError(f"tree {i}: word id {flat.max_word} is outside the vocabulary "
                             f"(vocab_size={vocab_size})")
        if flat.inner_words and no_word is None:
            raise ValueError(f"tree {i}: a node has both a word and children, {INNER_WORDS}")
        heights.append(flat.heights)
        tables.append(flat.table)
        flats.append(flat)
        size = flat.heights.shape[0]
        tree_sizes.append(size)
        num_nodes += size
        root_index.append(num_nodes - 1)  # a root is last in its tree's post-order
    tables.append(_sentinel_column(max_children))  # column num_nodes: null / pad rows
    # (numpy methods rather than np.* wrappers below: per-call overhead dominates)
    heights = np.concatenate(heights)
    num_levels = 0
    if unroll is not None and unroll[0] > 1:
        heights, num_levels = unrolled_levels(flats, *unroll, no_child=_NO_CHILD)
    elif not batching:
        heights = _one_node_per_level(heights)
    table = np.concatenate(tables, axis=1)
    return lay_out_levels(heights, table, np.array(root_index), tree_sizes, max_children, pad, no_word,
                          num_levels, distinct_leaves=distinct_leaves)


def lay_out_levels(heights, table, root_index, tree_sizes, max_children: int, pad: int, no_word,
                   num_levels: int = 0, node_order=None, distinct_leaves: bool = False) -> Linearized:
    """The layout shared by `linearize` and `linearize_arrays.linearize_parents`: level sizes,
    padding, slot order, the children table and the words, from the batch's nodes in *node
    order* (trees in batch order, each in post-order).

    ``heights``: each node's level; ``table``: int32 (2 + max_children, nodes + 1) as in
    ``flatten`` (word row with NO_WORD, child count, children relative to the parent or
    NO_CHILD) with the sentinel column last; ``root_index``: each tree's root in node order.
    Within a level, slots follow node order.  ``node_order``: the node-order position of every
    node in the caller's own order, which ``node_slots`` then follows (default: node order).
    ``distinct_leaves`` (pad 1): level 0 lists each word's first leaf, then the leaves that
    repeat a word (`repeats_last`; ``leaf_sources`` and ``leaf_words`` say which), the layout
    `distinct_leaves.distinct_leaves_first` makes of a plain one, without a pass over its arrays.
    """
    num_nodes = len(heights)
    # Level sizes, padded, give each level's slot range.
    level_counts = np.bincount(heights, minlength=num_levels)
    padded_counts = level_counts if pad == 1 else -(-level_counts // pad) * pad
    level_offsets = np.empty(len(level_counts) + 1, dtype=np.int32)
    level_offsets[0] = 1  # slot 0 is the null node
    padded_counts.cumsum(out=level_offsets[1:])
    level_offsets[1:] += 1
    num_slots = int(level_offsets[-1])

    # A stable sort by height lists the nodes in slot order; unless pad is 1,
    # each level's run is shifted by the padding added before it.
    level_order = heights.argsort(kind="stable").astype(np.int32)
    repeats = None
    if distinct_leaves:
        if pad != 1:
            raise ValueError(f"distinct_leaves: a layout of pad 1 (one node per slot), got pad {pad}")
        leaves = level_order[:level_counts[0] if len(level_counts) else 0].copy()     # (node order)
        leaf_words = table[0].take(leaves)
        leaf_words[leaf_words == _NO_WORD] = 0 if no_word is None else no_word
        order, sources, distinct = repeats_last(leaf_words)
        if order is not None:
            level_order[:len(leaves)] = leaves[order]
            repeats = (leaves[sources], distinct)
    if pad == 1:
        sorted_slots = np.arange(1, num_nodes + 1, dtype=np.int32)
        node_in_slot = np.empty(num_slots, dtype=np.int32)
        node_in_slot[0] = num_nodes
        node_in_slot[1:] = level_order
    else:
        padding_before = level_offsets[:-1] - 1 - (level_counts.cumsum() - level_counts)
        sorted_slots = np.arange(1, num_nodes + 1, dtype=np.int32)
        sorted_slots += padding_before.repeat(level_counts).astype(np.int32)
        node_in_slot = np.full(num_slots, num_nodes, dtype=np.int32)
        node_in_slot[sorted_slots] = level_order
    # slot_of_node is the inverse of node_in_slot; its extra last entry, for
    # the sentinel node, is NULL_SLOT.
    slot_of_node = np.empty(num_nodes + 1, dtype=np.int32)
    slot_of_node[level_order] = sorted_slots
    slot_of_node[num_nodes] = NULL_SLOT

    # Gather every per-node field into slot order at once: (2 + K, num_slots).
    by_slot = table.take(node_in_slot, axis=1)
    child_nodes = by_slot[2:]
    child_nodes += node_in_slot  # relative -> absolute node index
    np.minimum(child_nodes, num_nodes, out=child_nodes)  # _NO_CHILD -> sentinel
    # take() into a C-ordered array: plain fancy indexing with the transposed
    # index may return a Fortran-ordered result.  Indices are all in range,
    # so mode="clip" only skips take()'s buffering.
    children = np.empty((num_slots, max_children), dtype=np.int32)
    slot_of_node.take(child_nodes.T, out=children, mode="clip")

    words = by_slot[0]
    words[words == _NO_WORD] = 0 if no_word is None else no_word
    return Linearized(
        level_offsets=level_offsets,
        children=children,
        num_children=by_slot[1],
        words=words,
        roots=slot_of_node[root_index],
        node_slots=slot_of_node[:num_nodes] if node_order is None else slot_of_node.take(node_order),
        tree_sizes=np.array(tree_sizes, dtype=np.int32),
        leaf_sources=None if repeats is None else slot_of_node.take(repeats[0]),
        leaf_words=None if repeats is None else repeats[1],
    )


def check_bounds(lin: Linearized, max_children: int, vocab_size=None, no_word=None, node_tile: int = 1,
                 leaf_words: bool = False, unroll: tuple | None = None) -> None:
    """Check every invariant the kernel relies on and cannot check itself.

    ``linearize`` only produces valid arrays; this guards a Linearized that was
    built or edited by hand (``CompiledModel.run`` checks by default).
    - every index stays inside its buffer: children, roots and num_children
      within the slots, words within the vocabulary (``no_word``, a model's
      marker for "no word here", which it never indexes with, is allowed too);
    - every level has a multiple of ``node_tile`` slots: the kernel's node
      loops are cut to whole tiles, so a level's tail would be skipped;
    - every child sits in an earlier level (or is the null slot 0): a child in
      the same or a later level is read before it is computed, or while
      another core writes it;
    - with ``leaf_words`` (the leaves' states are hoisted tables indexed by
      word, with no clamp), every leaf slot holds a word of the vocabulary;
    - with ``unroll=(depth, chunks)`` (a recursively unrolled kernel), the
      levels are whole steps, and a child in the parent's own step is in the
      parent's own chunk (another chunk runs on another thread at that time).
    Raises ValueError naming the array and the invariant.
    """
    if not isinstance(lin, Linearized):
        raise TypeError(f"expected a Linearized, got {type(lin).__name__}")
    lo = np.asarray(lin.level_offsets)
    if lo.ndim != 1 or len(lo) < 2 or lo.dtype != np.int32 or lo[0] != 1:
        raise ValueError("level_offsets out of bounds: must be int32, start at 1 and never decrease")
    sizes = lo[1:] - lo[:-1]
    if sizes.min() < 0:
        raise ValueError("level_offsets out of bounds: must start at 1 and never decrease")
    n = int(lo[-1])
    for name, shape in (("children", (n, max_children)), ("num_children", (n,)), ("words", (n,)),
                        ("roots", None)):
        a = getattr(lin, name)
        if a.dtype != np.int32 or (shape is not None and a.shape != shape):
            raise ValueError(f"{name} out of bounds: expected int32 {shape or ''}, got {a.dtype} {a.shape}")

    # a negative int32 seen as uint32 is >= 2**31, so one max() checks both ends of a range
    def above(a, hi) -> bool:
        return a.size > 0 and int(a.view(np.uint32).max()) >= hi

    def out_of_bounds(name, a, hi):
        return ValueError(f"{name} out of bounds: values must lie in [0, {hi}), got [{a.min()}, {a.max()}]")

    if above(lin.roots, n):
        raise out_of_bounds("roots", lin.roots, n)
    if above(lin.num_children, max_children + 1):
        raise out_of_bounds("num_children", lin.num_children, max_children + 1)
    words = lin.words
    if vocab_size is not None:
        # the no-word marker (vocab_size itself, for models that read inner words) is allowed
        allowed = vocab_size + 1 if no_word == vocab_size else vocab_size
        if above(words, allowed) and (no_word is None or no_word == vocab_size
                                      or np.any((words != no_word) & ((words < 0) | (words >= vocab_size)))):
            bad = words[(words != no_word) & ((words < 0) | (words >= vocab_size))] if no_word is not None else words
            raise out_of_bounds("words", bad, vocab_size)
        if leaf_words and above(words[lo[0]:lo[1]], vocab_size):
            raise ValueError(f"words: a leaf slot holds {int(words[lo[0]:lo[1]].max())}, outside the vocabulary "
                             f"[0, {vocab_size}); leaf states are read from a table by word")
    if node_tile > 1 and (sizes % node_tile).any():
        level = int(np.flatnonzero(sizes % node_tile)[0])
        raise ValueError(f"level_offsets: level {level} has {sizes[level]} slots, not a multiple of the "
                         f"kernel's node tile {node_tile} (its last nodes would not be computed)")
    # slot 0 is the null node, never computed; every other slot's children lie in [0, the first
    # slot of its own level): inside the buffer and computed before it
    kids = lin.children[1:]
    level_start = np.repeat(lo[:-1], sizes)
    late = kids.view(np.uint32) >= level_start[:, None]
    if late.any():
        if kids.min() < 0 or kids.max() >= n:
            raise ValueError(f"children out of bounds: values must lie in [0, {n}), got [{kids.min()}, {kids.max()}]")
        rows, cols = np.nonzero(late)
        slot, j = int(rows[0]) + 1, int(cols[0])
        child = int(lin.children[slot, j])
        raise ValueError(f"children: slot {slot}'s child {j} is slot {child}, which is not in an earlier "
                         f"level (slot {slot}'s level starts at slot {int(level_start[slot - 1])}); a "
                         "child must be computed before its parent")
    if unroll is not None and unroll[0] > 1:
        _check_unrolled(lin, sizes, *unroll)


def _check_unrolled(lin: Linearized, sizes, depth: int, chunks: int) -> None:
    per_step = levels_per_step(depth, chunks)
    if (len(sizes) - 1) % per_step:
        raise ValueError(f"level_offsets: {len(sizes)} levels, not the leaves plus whole steps of "
                         f"{per_step} levels ({chunks} chunks x {depth} phases) that the unrolled kernel walks")
    level = np.zeros(lin.num_slots, dtype=np.int64)
    level[1:] = np.repeat(np.arange(len(sizes)), sizes)
    found = check_unrolled_children(level[1:], level[lin.children[1:]], depth, chunks)
    if found is not None:
        slot, j = found[0] + 1, found[1]
        child = int(lin.children[slot, j])
        raise ValueError(f"children: slot {slot}'s child {j} is slot {child}, computed in the same step by "
                         f"another chunk (levels {level[child]} and {level[slot]}, {chunks} chunks x {depth} "
                         "phases a step); in an unrolled kernel a child in its parent's step must be in "
                         "its parent's chunk")
