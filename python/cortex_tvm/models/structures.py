"""Structures beyond trees for the model zoo: DAGs, and words on every node.

``ra.DAG(max_children)`` is a spec with ``kind="dag"``: a node may be the
child (predecessor) of several parents and is computed once; the
linearizer is told so by the spec (``allow_shared=True``).

Sequence and DAG models need an input at every element: an element is
``Node(word=x, children=predecessors)`` and the model reads ``word[n]`` at
every node through an optional node input (``ra.node_input(...,
optional=True)``), x = 0 at a node without a word.  See ``data.sequence``
and ``data.grid_dag``.
"""
from __future__ import annotations



def leaf_and_internal(lin):
    """(leaf slot range, [(start, end) of each internal level])."""
    lo = lin.level_offsets
    return (int(lo[0]), int(lo[1])), [(int(a), int(b)) for a, b in zip(lo[1:-1], lo[2:])]


def count_leaves_internal(lin):
    lo = lin.level_offsets
    return int(lo[1] - lo[0]), int(lo[-1] - lo[1])
