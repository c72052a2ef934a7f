"""The level layout of CORTEX's recursive unrolling: a node computed in one step with its
descendants down to `depth` levels, on the thread that computes it.

With depth d, the nodes whose depth below their root is a multiple of d are
*tops*; every other internal node belongs to the group of its nearest top
ancestor (in a tree that ancestor is unique).  A group is computed in one
step: its nodes d-1 below the top first, the top last (phase d-1), so every
node's children inside the group are ready before it; children below the
group are tops of earlier steps, or leaves.  The step of a group is one more
than the latest step it reads, so each step's groups read only earlier steps
and their own nodes.

Each step's groups are split into `chunks` runs, one per thread of the
kernel's parallel loop, so a group's nodes never wait for another thread: no
barrier between a node and its children, only between steps.  Level
`1 + ((step - 1) * chunks + chunk) * d + phase` holds a chunk's nodes of one
phase; leaves stay level 0.  The kernel (`RecSchedule.unroll_recursion`)
walks steps, runs the chunks in parallel and, inside a chunk, the phases in
order.

Example (depth 2, one chunk): a chain root <- a <- b <- c <- leaf has tops
root and b (depths 0 and 2).  Step 1 is b's group: c (phase 0), then b
(phase 1); step 2 is the root's group: a, then the root.

Imports only numpy: the deploy side linearizes with it.
"""
from __future__ import annotations

import weakref

import numpy as np

__all__ = ["unrolled_levels", "check_unrolled_children", "levels_per_step"]

#: _Flat -> {depth: (step, phase, group)}: a tree's groups depend only on the tree and depth
_tree_cache: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def levels_per_step(depth: int, chunks: int) -> int:
    return depth * chunks


def _tree_groups(flat, depth: int, no_child: int):
    """Per node of one flat tree (post-order): (step, phase, group), group = the post-order
    position of its top.  Leaves get step 0."""
    cached = _tree_cache.get(flat)
    if cached is not None and depth in cached:
        return cached[depth]
    table = flat.table
    n = table.shape[1]
    leaf = table[1] == 0
    relative = table[2:]
    has_child = relative != no_child
    # child positions; n stands for "no child" and indexes one extra entry of each array below
    child = np.where(has_child, relative + np.arange(n, dtype=np.int32), n)
    parent = np.full(n, -1, dtype=np.int32)
    rows, cols = np.nonzero(has_child)
    parent[child[rows, cols]] = cols
    # depths below the root (last in post-order), one frontier per depth
    node_depth = np.zeros(n, dtype=np.int32)
    frontiers = []
    frontier = np.array([n - 1], dtype=np.int32)
    d = 0
    while frontier.size:
        kids = child[:, frontier].ravel()
        frontier = kids[kids < n]
        d += 1
        node_depth[frontier] = d
        if frontier.size:
            frontiers.append(frontier)
    offset = node_depth % depth
    is_top = np.append((offset == 0) & ~leaf, False)
    # bottom-up: the step a node's group needs (a top child adds one: its step is earlier)
    need = np.zeros(n + 1, dtype=np.int32)
    heights = flat.heights.astype(np.int32)
    for h in range(1, int(heights.max()) + 1 if n else 1):
        nodes = np.flatnonzero(heights == h)
        kids = child[:, nodes]
        need[nodes] = np.maximum((need[kids] + is_top[kids]).max(axis=0), 1)
    # top-down: inner nodes take their top's step and group
    step = need[:n].copy()
    group = np.arange(n, dtype=np.int32)
    for frontier in frontiers:
        inner = frontier[offset[frontier] != 0]
        step[inner] = step[parent[inner]]
        group[inner] = group[parent[inner]]
    step[leaf] = 0
    phase = (depth - 1 - offset).astype(np.int32)
    result = (step, phase, group)
    _tree_cache.setdefault(flat, {})[depth] = result
    return result


def unrolled_levels(flats, depth: int, chunks: int, no_child: int) -> tuple:
    """(level of every node of the batch, number of levels) for recursive unrolling.

    flats: the batch's flat trees (`flatten._Flat`, post-order tables) in
    batch order.  Raises ValueError for a DAG (a node with several parents
    belongs to no single group).
    """
    steps, phases, groups, internal = [], [], [], []
    start = 0
    for i, flat in enumerate(flats):
        if flat.shared:
            raise ValueError(f"tree {i}: a node has several parents (a DAG); recursive unrolling computes "
                             "a node inside its one parent's step, so a DAG cannot be unrolled "
                             "(compile with max_unroll_depth=1)")
        step, phase, group = _tree_groups(flat, depth, no_child)
        steps.append(step)
        phases.append(phase)
        groups.append(group + start)
        internal.append(flat.table[1] != 0)
        start += step.shape[0]
    step, phase, group, internal = (np.concatenate(a) for a in (steps, phases, groups, internal))
    num_steps = int(step.max()) if step.size else 0
    # each step's tops, in batch order, cut into `chunks` runs of (nearly) equal count
    tops = np.flatnonzero(internal & (group == np.arange(group.shape[0])))
    top_step = step[tops]
    order = top_step.argsort(kind="stable")
    per_step = np.bincount(top_step, minlength=num_steps + 1)
    first = per_step.cumsum() - per_step
    rank = np.empty(tops.shape[0], dtype=np.int64)
    rank[order] = np.arange(tops.shape[0]) - first[top_step[order]]
    chunk = np.zeros(group.shape[0], dtype=np.int64)
    chunk[tops] = rank * chunks // per_step[top_step]
    chunk = chunk[group]
    levels = np.where(internal, 1 + ((step - 1) * chunks + chunk) * depth + phase, 0).astype(np.int32)
    return levels, 1 + num_steps * levels_per_step(depth, chunks)


def check_unrolled_children(level_of_slot, children_level, depth: int, chunks: int):
    """(row, column) of the first child that an unrolled kernel would read from another thread
    in the same step, or None.  Both arrays hold levels (children_level: per child entry)."""
    per_step = levels_per_step(depth, chunks)
    parent_level = level_of_slot[:, None]
    same_step = (children_level - 1) // per_step == (parent_level - 1) // per_step
    other_chunk = (children_level - 1) // depth != (parent_level - 1) // depth
    bad = same_step & other_chunk & (children_level > 0)
    if not bad.any():
        return None
    rows, cols = np.nonzero(bad)
    return int(rows[0]), int(cols[0])
