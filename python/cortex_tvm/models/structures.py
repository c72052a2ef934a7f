"""Structures beyond trees for the model zoo: DAGs, and per-node inputs through input carriers.

``ra.DAG(max_children)`` is a spec with ``kind="dag"``: a node may be the
child (predecessor) of several parents and is computed once; the
linearizer is told so by the spec (``allow_shared=True``).

Input carriers: a ``data.Node`` holds a word XOR children, but sequence and
DAG models need an input at every element.  An element with predecessors is
``Node(children=[Node(word=x), *predecessors])``: child 0 is a leaf that
carries the element's input and the model reads ``word[child(n, 0)]``; an
element without predecessors is the leaf ``Node(word=x)`` itself.  See
``data.sequence`` and ``data.grid_dag``.  Carrier leaves are computed with
the leaf equations like any leaf (their states are not used by their
parents, which read only their word).
"""
from __future__ import annotations



def leaf_and_internal(lin):
    """(leaf slot range, [(start, end) of each internal level])."""
    lo = lin.level_offsets
    return (int(lo[0]), int(lo[1])), [(int(a), int(b)) for a, b in zip(lo[1:-1], lo[2:])]


def count_leaves_internal(lin):
    lo = lin.level_offsets
    return int(lo[1] - lo[0]), int(lo[-1] - lo[1])
