"""The Recursive API (RA): models written as per-node tensor equations.

A model says what one node computes, once for leaves and once for internal
nodes, in TVM compute style; the recursion is only visible through reads of a
recursive state at a child (`h[child(n, j), k]`).  Nothing is computed here:
the objects below are a description that `cortex_tvm.lower` turns into TIR.

TreeFC, the CORTEX paper's running example, is `models/tree_fc.py`; its core::

    h = ra.rec_placeholder("h", (H,))                      # the recursive state
    leaf_h = ra.compute((H,), lambda i: emb[word[n], i], name="leaf_h")
    child_sum = ra.compute((H,), lambda i: h[ra.child(n, 0), i] + h[ra.child(n, 1), i], name="child_sum")
    internal_h = ra.compute((H,), lambda i: ra.tanh(ra.sum(W[i, k] * child_sum[k], k) + b[i]), name="internal_h")
    program = ra.rec_compute(ra.Tree(max_children=2), {h: (leaf_h, internal_h)})

Indexing a per-node tensor (`child_sum[k]`) means "at the current node";
indexing a recursive state takes the node first (`h[child(n, 0), i]`).
"""
from __future__ import annotations

import contextlib
import itertools
import threading
from dataclasses import dataclass, field

from tvm import te, tirx

__all__ = [
    "Tree", "DAG", "node", "node_input", "node_features", "weight", "rec_placeholder", "compute", "reduce_axis",
    "sum", "child", "num_children", "is_leaf", "rec_compute", "sigmoid", "tanh", "exp",
    "if_then_else", "zero", "RecProgram", "NodeInput", "NodeFeatures", "Weight", "RecState", "Compute",
]


# ----------------------------------------------------------------------------- structures
@dataclass(frozen=True)
class Tree:
    """A tree whose nodes have at most `max_children` children (a leaf has none)."""

    max_children: int = 2
    kind: str = "tree"

    def __post_init__(self):
        if not isinstance(self.max_children, int) or self.max_children < 1:
            raise ValueError(f"Tree(max_children=...) must be a positive int, got {self.max_children!r}")


@dataclass(frozen=True)
class DAG(Tree):
    """A DAG whose nodes have at most `max_children` children (predecessors); a node
    shared by several parents is computed once."""

    kind: str = "dag"


# ----------------------------------------------------------------------------- lowering context
class _Context(threading.local):
    """Where the current per-node compute is being instantiated (set by `lower`).

    `node` is the node id expression, `position` the loop variable over the
    nodes of the level, and `tensors`/`buffers` translate RA objects to TE.
    """

    def __init__(self):
        self.active = None


_ctx = _Context()


@dataclass
class Binding:
    """How RA objects map to TE objects while one stage is lowered.

    `node`/`position` change while each compute body runs; `instantiate(c)`
    turns a Compute into a te.Tensor (it sets them for c's own body).
    """

    node: object                 # PrimExpr: id of the current node
    position: object             # PrimExpr: loop variable over the level's nodes
    tensors: dict                # Compute -> te.Tensor with a leading node-position axis
    placeholders: dict           # Weight / NodeInput / RecState / "children" -> te.Tensor
    instantiate: object = None


@contextlib.contextmanager
def binding(b: Binding):
    previous, _ctx.active = _ctx.active, b
    try:
        yield b
    finally:
        _ctx.active = previous


def _active() -> Binding:
    if _ctx.active is None:
        raise RuntimeError("RA expressions are evaluated by cortex_tvm.lower; "
                           "index RA tensors only inside ra.compute bodies")
    return _ctx.active


def _node_expr(n):
    return _active().node if isinstance(n, _NodeRef) else n


class _NodeRef:
    """The node being computed; `ra.node()` returns it."""

    def __repr__(self):
        return "n"


_THE_NODE = _NodeRef()


def node() -> _NodeRef:
    """The symbolic current node `n` of the recursion."""
    return _THE_NODE


# ----------------------------------------------------------------------------- inputs
def _as_tuple(idx):
    return idx if isinstance(idx, tuple) else (idx,)


@dataclass(eq=False)
class NodeInput:
    """An int32 value per node (e.g. a word id); `bound` = number of valid values.

    `missing` is None when only leaves are read (every leaf has a word; inner
    nodes hold 0).  Otherwise inner nodes may have the input too, and a node
    without one holds `missing` (== bound): read such an input with
    `index(n)`, a value that is always a valid row, and test `present(n)`.
    """

    name: str
    bound: int
    missing: int | None = None

    def __getitem__(self, n):
        return _active().placeholders[self][_node_expr(n)]

    def index(self, n):
        """The value at node `n`, safe to index with: clamped to [0, bound) where it may be missing
        (the marker is out of range), as is otherwise (so non-optional programs are unchanged)."""
        return self[n] if self.missing is None else tirx.min(self[n], self.last_row)

    @property
    def last_row(self):
        """The row `index` clamps to where the input may be missing (bound - 1), else None."""
        return None if self.missing is None else self.bound - 1

    def present(self, n):
        """True where node `n` has this input (always true at a leaf)."""
        if self.missing is None:
            raise ValueError(f"node_input {self.name!r}: present() needs node_input(..., optional=True)")
        return self[n] != self.missing


@dataclass(eq=False)
class NodeFeatures:
    """A float32 vector of `size` per node that comes with each batch (contextual token
    embeddings, AST node or atom features): `x[n, f]` is feature f of node n.

    Unlike a weight, it changes from call to call, so nothing that reads it can be
    precomputed (`hoist` refuses); unlike an embedding, no word picks the row: the
    executor lays the caller's rows out in the kernel's slot order, one row per node.
    """

    name: str
    size: int
    dtype: str = "float32"

    def __getitem__(self, idx):
        idx = _as_tuple(idx)
        if len(idx) != 2:
            raise IndexError(f"node_features {self.name!r}: index it as {self.name}[node, feature], got {len(idx)} "
                             "indices")
        return _active().placeholders[self][(_node_expr(idx[0]), idx[1])]


_declaration_order = itertools.count()


@dataclass(eq=False)
class Weight:
    """A model parameter of fixed shape and dtype (float32 unless given; parameters keep declaration order)."""

    name: str
    shape: tuple
    dtype: str = "float32"
    order: int = field(default_factory=lambda: next(_declaration_order))

    def __getitem__(self, idx):
        return _active().placeholders[self][_as_tuple(idx)]


@dataclass(eq=False)
class RecState:
    """A recursive state: one row per node, read at other nodes (children) by index."""

    name: str
    shape: tuple
    dtype: str = "float32"

    def __getitem__(self, idx):
        idx = _as_tuple(idx)
        return _active().placeholders[self][(_node_expr(idx[0]),) + idx[1:]]


@dataclass(eq=False)
class Compute:
    """A per-node tensor: `fcompute(*idx)` gives element idx at the current node."""

    shape: tuple
    fcompute: object
    name: str

    def __getitem__(self, idx):
        b = _active()
        if self not in b.tensors:          # producers are instantiated on first use
            b.tensors[self] = b.instantiate(self)
        return b.tensors[self][(b.position,) + _as_tuple(idx)]


def node_input(name: str, bound: int, optional: bool = False) -> NodeInput:
    """A per-node int input with values in [0, bound).  optional=True: inner nodes may carry it
    too and a node may lack it (see `NodeInput.index` / `NodeInput.present`)."""
    if not isinstance(bound, int) or bound < 1:
        raise ValueError(f"node_input {name!r}: bound must be a positive int, got {bound!r}")
    return NodeInput(name, bound, bound if optional else None)


def node_features(name: str, size: int) -> NodeFeatures:
    """A per-node float32 input vector of `size` features, given with each batch
    (`compiled(trees, features=X)`, X of shape (nodes, size)).

    Example (leaves that read 768-dimensional features)::

        n, H, F = ra.node(), 128, 768
        x, Wx, b = ra.node_features("x", F), ra.weight("Wx", (H, F)), ra.weight("b", (H,))
        f = ra.reduce_axis(F, "f")
        leaf_h = ra.compute((H,), lambda i: ra.tanh(ra.sum(Wx[i, f] * x[n, f], f) + b[i]), name="leaf_h")
    """
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise ValueError(f"node_features {name!r}: size must be a positive int, got {size!r}")
    return NodeFeatures(name, size)


def weight(name: str, shape, dtype: str = "float32") -> Weight:
    return Weight(name, tuple(int(s) for s in shape), dtype)


def rec_placeholder(name: str, shape, dtype: str = "float32") -> RecState:
    """A recursive state of per-node shape `shape` (the paper's `rec_placeholder`)."""
    return RecState(name, tuple(int(s) for s in shape), dtype)


def compute(shape, fcompute, name: str) -> Compute:
    """A per-node tensor of shape `shape`; `fcompute(*idx)` is its value at the current node."""
    return Compute(tuple(int(s) for s in shape), fcompute, name)


def reduce_axis(extent: int, name: str = "k"):
    return te.reduce_axis((0, int(extent)), name)


def sum(expr, axis):  # noqa: A001 - mirrors te.sum
    return te.sum(expr, axis=axis)


sigmoid = te.sigmoid
tanh = te.tanh
exp = te.exp


def if_then_else(cond, then_value, else_value):
    return tirx.if_then_else(cond, then_value, else_value)


def zero(dtype: str = "float32"):
    """A typed zero (e.g. the else branch of `if_then_else` on float32 values)."""
    return tirx.const(0, dtype)


# ----------------------------------------------------------------------------- node intrinsics
def child(n, j):
    """Node id of child `j` of node `n` (the null node, whose states are zero, if absent)."""
    return _active().placeholders["children"][_node_expr(n), j]


def num_children(n):
    return _active().placeholders["num_children"][_node_expr(n)]


def is_leaf(n):
    return num_children(n) == 0


# ----------------------------------------------------------------------------- the program
@dataclass
class RecProgram:
    """A recursive model: for each state, its value at a leaf and at an internal node."""

    spec: Tree
    states: list                       # [RecState], the first one is the model's output
    leaf: dict                         # RecState -> Compute
    internal: dict                     # RecState -> Compute


def rec_compute(spec: Tree, cases: dict) -> RecProgram:
    """Tie recursive states to their (leaf, internal) computes.

    `cases` maps each RecState to a pair `(leaf_compute, internal_compute)`;
    the shapes must match the state's.  The first state is what the compiled
    model returns for each root.
    """
    if not isinstance(spec, Tree):
        raise TypeError(f"rec_compute: spec must be ra.Tree, got {type(spec).__name__}")
    if not cases:
        raise ValueError("rec_compute: no recursive states given")
    states, leaf, internal = [], {}, {}
    for state, pair in cases.items():
        if not isinstance(state, RecState):
            raise TypeError(f"rec_compute: keys must be rec_placeholder states, got {state!r}")
        leaf_c, internal_c = pair
        for which, c in (("leaf", leaf_c), ("internal", internal_c)):
            if not isinstance(c, Compute):
                raise TypeError(f"rec_compute: {which} value of {state.name!r} must be ra.compute")
            if c.shape != state.shape:
                raise ValueError(f"rec_compute: {which} value {c.name!r} has shape {c.shape}, "
                                 f"state {state.name!r} has {state.shape}")
        states.append(state)
        leaf[state], internal[state] = leaf_c, internal_c
    return RecProgram(spec, states, leaf, internal)
