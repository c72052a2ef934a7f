"""Structures from arrays: parent arrays and edge lists (networkx, PyG, DGL) -> ``Node``s.

    roots = ct.data.from_parents([2, 2, -1], words=[4, 7, -1])      # node 2 has children 0, 1
    src, dst = g.edges()                                               # a DGL tree, edges child -> parent
    roots = ct.data.from_edges(zip(src, dst), words=g.ndata["x"], direction="child_to_parent")
    roots = ct.data.from_edges(edge_index.t(), words=x, direction="parent_to_child")   # PyG: (2, E)

Children keep the order the arrays give them (increasing node index for parent
arrays, edge order for edge lists): for a binary TreeLSTM that order is left,
right.  A word of -1 (or None) means "no word": every leaf needs one.  A node
with several parents is shared (a DAG: only DAG models accept it); a cycle, an
index out of range or a leaf without a word is a ValueError naming the node.
"""
from __future__ import annotations

import operator

import numpy as np

from ..weights import from_torch
from .node import Node, _is_int

#: edge directions `from_edges` accepts: which end of an edge (u, v) is the parent
DIRECTIONS = ("child_to_parent", "parent_to_child")


def _words(words, count):
    if words is None:
        return [None] * count
    words = [None if w is None or (_is_int(w) and int(w) < 0) else w for w in _as_list(words)]
    if len(words) != count:
        raise ValueError(f"words has {len(words)} entries for {count} nodes")
    for i, w in enumerate(words):
        if w is not None and not _is_int(w):
            raise TypeError(f"words[{i}] must be an int word id (or -1 / None for none), got {type(w).__name__}")
    return [None if w is None else int(w) for w in words]


def _as_list(values) -> list:
    return values.tolist() if hasattr(values, "tolist") else list(values)


def _index(value):
    """An int node index from a Python, numpy or 0-d torch integer; None for anything else."""
    if isinstance(value, bool) or type(value).__name__ == "bool_":
        return None
    try:
        return operator.index(value)
    except TypeError:
        return None


def _build(children: list, words: list) -> list:
    """The roots, built bottom-up (no recursion: chains may be long); ValueError on a cycle."""
    count = len(children)
    has_parent = [False] * count
    for kids in children:
        for c in kids:
            has_parent[c] = True
    roots = [i for i in range(count) if not has_parent[i]]
    if count and not roots:
        raise ValueError("the structure has a cycle: every node has a parent")
    made: list = [None] * count
    state = [0] * count                       # 0 new, 1 on the stack, 2 built
    for root in roots:
        stack = [(root, False)]
        while stack:
            node, expanded = stack.pop()
            if state[node] == 2:
                continue
            if expanded:
                kids = [made[c] for c in children[node]]
                if not kids and words[node] is None:
                    raise ValueError(f"node {node} is a leaf without a word (every leaf needs one)")
                made[node] = Node(word=words[node], children=kids or None)
                state[node] = 2
                continue
            state[node] = 1
            stack.append((node, True))
            for c in reversed(children[node]):
                if state[c] == 1:
                    raise ValueError(f"the structure has a cycle through nodes {node} and {c}")
                if state[c] == 0:
                    stack.append((c, False))
    unbuilt = [i for i in range(count) if state[i] != 2]
    if unbuilt:
        raise ValueError(f"the structure has a cycle: nodes {unbuilt[:5]} are not reachable from a root")
    return [made[r] for r in roots]


def from_parents(parents, words=None) -> list:
    """Roots of the forest whose node i has parent ``parents[i]`` (-1 for a root).

    ``words[i]``: node i's word id, -1 or None for none.  Returns the roots in
    index order; children are in increasing index order."""
    parents = _as_list(parents)
    pairs = []
    for i, p in enumerate(parents):
        if _index(p) is None:
            raise TypeError(f"parents[{i}] must be an int, got {type(p).__name__}")
        if _index(p) != -1:
            pairs.append((_index(p), i))
    return _build(_children(pairs, len(parents), lambda k: f"parents[{pairs[k][1]}] = {pairs[k][0]}"),
                  _words(words, len(parents)))


def from_edges(edges, words=None, *, direction: str, num_nodes: int | None = None) -> list:
    """Roots of the structure with the edges ``(u, v)`` given: an iterable of pairs (networkx's
    ``G.edges``, DGL's ``zip(*g.edges())``, PyG's ``edge_index.t()``; ints, numpy or torch).

    direction: "child_to_parent" (u is the child: DGL's TreeLSTM, message-passing order) or
    "parent_to_child" (u is the parent).  num_nodes: the node count (default: one past the
    largest index, or len(words)).  Children are in the order their edges come."""
    if direction not in DIRECTIONS:
        raise ValueError(f"direction must be one of {DIRECTIONS}, got {direction!r}")
    pairs = []
    for k, edge in enumerate(edges):
        edge = [_index(x) for x in _as_list(edge)]
        if len(edge) != 2 or None in edge:
            raise ValueError(f"edge {k} must be a pair of int node indices, got {edge!r}")
        u, v = edge
        pairs.append((v, u) if direction == "child_to_parent" else (u, v))
    if num_nodes is None:
        num_nodes = len(_as_list(words)) if words is not None else 1 + max((max(p) for p in pairs), default=-1)
    return _build(_children(pairs, num_nodes, lambda k: f"edge {k}"), _words(words, num_nodes))


def _children(pairs, count: int, where) -> list:
    """Per node, its children in the order of (parent, child) `pairs`; `where(k)` names pair k
    in an error."""
    children: list = [[] for _ in range(count)]
    for k, (parent, child) in enumerate(pairs):
        for x in (parent, child):
            if not 0 <= x < count:
                raise ValueError(f"{where(k)}: node {x} is not one of the {count} nodes (-1 marks a root)")
        if parent == child:
            raise ValueError(f"{where(k)}: node {parent} would be its own parent")
        children[parent].append(child)
    return children


def from_dgl(graph, words: str | None = "x", features: str | None = None,
             direction: str = "child_to_parent") -> dict:
    """A DGLGraph batch of trees (`dgl.batch` of trees, as DGL's TreeLSTM example builds them) as
    the keyword arguments of a compiled model's call, with no Node built:

        out = compiled(**ct.data.from_dgl(g))                          # parents=, words=
        out = compiled(**ct.data.from_dgl(g, words=None, features="h"))  # parents=, features=

    parents[i] is node i's parent (-1 at a root), from the edges (DGL's TreeLSTM: child -> parent;
    "parent_to_child" for the other way).  words: the `ndata` field of word ids (DGL's SST: "x",
    -1 where a node has none), or None.  features: the `ndata` field of per-node float32 vectors,
    or None.  Everything stays in DGL's node order, so `all_nodes=True` results line up with
    `g.ndata`; roots come out in the order their ids appear.  A node's children are ordered by
    node id (DGL's SST numbers a left child before its right sibling).  Only the graph's
    `edges()`, `num_nodes()` and `ndata` are used: dgl itself is not imported.  A node with two
    parents (a DAG) is a ValueError: build Nodes with `from_edges` for DAG models.
    """
    if direction not in DIRECTIONS:
        raise ValueError(f"direction must be one of {DIRECTIONS}, got {direction!r}")
    src, dst = (np.asarray(from_torch(x), dtype=np.int64).ravel() for x in graph.edges())
    child, parent = (src, dst) if direction == "child_to_parent" else (dst, src)
    count = int(graph.num_nodes())
    parents = np.full(count, -1, np.int64)
    if child.size:
        if child.min() < 0 or max(child.max(), parent.max()) >= count:
            raise ValueError(f"from_dgl: an edge names a node outside the graph's {count} nodes")
        seen = np.bincount(child, minlength=count)
        if seen.max() > 1:
            node = int(seen.argmax())
            raise ValueError(f"from_dgl: node {node} has {int(seen[node])} parents: a forest has one per node "
                             "(for a DAG model, build Nodes with ct.data.from_edges)")
        parents[child] = parent
    out = {"parents": parents}
    for key, field in (("words", words), ("features", features)):
        if field is not None:
            if field not in graph.ndata:
                raise ValueError(f"from_dgl: the graph has no ndata[{field!r}] (fields: {sorted(graph.ndata)})")
            out[key] = np.asarray(from_torch(graph.ndata[field]))
    if "words" in out:
        out["words"] = np.asarray(out["words"]).astype(np.int64).ravel()
    return out
