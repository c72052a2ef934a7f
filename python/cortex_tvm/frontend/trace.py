"""Tracing a recursive cell: the `@ct.recursive` decorator, the node and weight proxies.

The user's function is called twice, once with a leaf (`node.is_leaf` is
True) and once with an inner node, so a Python `if node.is_leaf:` picks the
case being traced.  `p.<name>` reads a weight, `p.<table>[node.word]` an
embedding row, and a call of the function itself on `node.children[j]`
returns that child's states as symbolic tensors.  The leaf case is traced
first: it fixes how many states there are and their shapes, which the inner
case's child reads need.
"""
from __future__ import annotations

import functools
import sys
import threading
from dataclasses import dataclass, field

from .tensor import Tensor, Word
from .where import UnsupportedAttribute, Where, caller, type_error, value_error
from .where import cell as _cell

class _Active(threading.local):
    ctx = None


_active = _Active()


class Recursive:
    """A recursive cell made by `@ct.recursive`; compile it with `ct.compile`."""

    def __init__(self, fn):
        if not callable(fn):
            raise TypeError(f"@ct.recursive decorates a function, got {type(fn).__name__}")
        functools.update_wrapper(self, fn)
        self.fn = fn

    def __repr__(self):
        return f"<ct.recursive {self.__name__}>"

    def __call__(self, node, p, *extra, **kwargs):
        ctx = _active.ctx
        name = self.__name__
        if ctx is None:
            raise TypeError(f"{name} is a recursive model, not called directly: compile it with "
                            f"ct.compile({name}, weights={{...}}, max_children=...) and call the result "
                            "on a list of trees")
        if ctx.recursive is not self:
            raise type_error(f"{name}(...) called inside {ctx.recursive.__name__}: a traced cell may "
                             "only call itself")
        if extra or kwargs:
            raise type_error(f"{name}(node.children[j], p) takes exactly two arguments")
        if not isinstance(node, ChildRef) or node.ctx is not ctx:
            raise type_error(f"{name}(...) inside {name} must be called on node.children[j], "
                             f"got {type(node).__name__}")
        if p is not ctx.params:
            raise type_error(f"{name}(node.children[j], p): pass the weights p on unchanged")
        return ctx.child_states(node.j)


def recursive(fn) -> Recursive:
    """Mark a plain recursive Python function as a cortex_tvm model (compile with `ct.compile`).

    The function takes `(node, p)` and returns the node's state (a tensor) or
    states (a tuple); it reads `node.is_leaf`, `p.<table>[node.word]`, calls
    itself on `node.children[j]`, and computes with `@`, `+ - * /` and the
    `ct.*` functions.  Example, a child-sum tree RNN over up to 4 children::

        @ct.recursive
        def child_sum_rnn(node, p):
            if node.is_leaf:
                return ct.tanh(p.Wx @ p.emb[node.word] + p.b)
            total = sum(child_sum_rnn(child, p) for child in node.children)
            return ct.tanh(p.U @ total + p.b)
    """
    return Recursive(fn)


# ----------------------------------------------------------------------------- proxies
class ChildRef:
    """`node.children[j]`: only passed to the cell itself, which returns child j's states."""

    def __init__(self, ctx, j):
        self.ctx, self.j = ctx, j

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        fn = self.ctx.recursive.__name__
        raise UnsupportedAttribute(f"node.children[{self.j}].{name}: a cell inspects only its own node; "
                                   f"call {fn}(node.children[{self.j}], p) for the child's states ({caller()})")


class Children:
    """`node.children`: empty at a leaf, `max_children` slots at an inner node."""

    def __init__(self, ctx):
        self.ctx = ctx

    def _slots(self):
        return [] if self.ctx.leaf else [ChildRef(self.ctx, j) for j in range(self.ctx.max_children)]

    def __getitem__(self, j):
        if isinstance(j, slice):
            return self._slots()[j]
        if not isinstance(j, int) or isinstance(j, bool):
            raise type_error(f"node.children[{j!r}]: index with an int")
        if self.ctx.leaf:
            raise value_error(f"node.children[{j}] at a leaf: a leaf has no children "
                              "(test node.is_leaf first)")
        if not 0 <= j < self.ctx.max_children:
            raise value_error(f"node.children[{j}]: max_children={self.ctx.max_children}, so j is in "
                              f"0..{self.ctx.max_children - 1} (a missing child reads zero states)")
        return ChildRef(self.ctx, j)

    def __iter__(self):
        return iter(self._slots())

    def __bool__(self):
        return not self.ctx.leaf

    def __len__(self):
        raise type_error("len(node.children) depends on the tree, so it cannot be traced; loop over "
                         "node.children instead (max_children slots, a missing child reads zero states)")


class NodeProxy:
    """The node a traced cell sees: `is_leaf`, `word`, `features`, `children`."""

    def __init__(self, ctx):
        self._ctx = ctx

    @property
    def is_leaf(self) -> bool:
        return self._ctx.leaf

    @property
    def word(self) -> Word:
        """The node's word, as an embedding index.  An inner node may have one (dependency
        trees, `data.Node(word=w, children=[...])`); at one without, `p.<table>[node.word]`
        reads a row of zeros."""
        return Word()

    @property
    def features(self) -> Tensor:
        """The node's feature vector, given with each batch (`compiled(trees, features=X)`), of the
        width passed as `ct.compile(..., features=F)`; read at leaves and inner nodes alike."""
        if self._ctx.feature_size is None:
            raise value_error("node.features: the cell reads per-node features, so give their width: "
                              "ct.compile(cell, weights=..., features=F)")
        return Tensor("features", (), (self._ctx.feature_size,))

    @property
    def children(self) -> Children:
        return Children(self._ctx)

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        raise UnsupportedAttribute(f"node.{name} cannot be traced; a node offers is_leaf, word, features "
                                   f"and children ({caller()})")


class Params:
    """`p`: the weights by attribute, `p.W`, each a symbolic tensor of the given shape."""

    def __init__(self, shapes: dict, used: set):
        self._shapes, self._used = shapes, used

    def __getattr__(self, name):
        if name.startswith("__") or name.startswith("_"):
            raise AttributeError(name)
        if name not in self._shapes:
            raise value_error(f"p.{name}: no weight {name!r} in weights= (given: {sorted(self._shapes)})")
        self._used.add(name)
        return Tensor("weight", (), self._shapes[name], name=name)


# ----------------------------------------------------------------------------- the trace
@dataclass
class Case:
    """One traced case: its states, whether it returned one tensor or a tuple, its return line."""

    states: tuple
    single: bool
    where: Where | None


@dataclass
class Trace:
    """Both cases of a recursive cell, traced against the given weight shapes."""

    name: str
    max_children: int
    weight_shapes: dict
    leaf: Case
    inner: Case
    used: set = field(default_factory=set)

    @property
    def state_shapes(self) -> list:
        return [s.shape for s in self.leaf.states]


@dataclass
class _Context:
    recursive: Recursive
    leaf: bool
    max_children: int
    params: Params
    template: Case | None = None
    feature_size: int | None = None

    def child_states(self, j):
        states = tuple(Tensor("child", (), s.shape, j=j, state=i) for i, s in enumerate(self.template.states))
        return states[0] if self.template.single else states


def _call(fn, node, params):
    """fn(node, params) and the line of its return statement (from a profile hook on fn's frame)."""
    code, seen = getattr(fn, "__code__", None), {}

    def hook(frame, event, _arg):
        if event == "return" and frame.f_code is code:
            seen["where"] = Where(code.co_filename, frame.f_lineno, code.co_name)
    own_hook = code is not None and sys.getprofile() is None   # never displace a profiler
    if own_hook:
        sys.setprofile(hook)
    try:
        result = fn(node, params)
    finally:
        if own_hook:
            sys.setprofile(None)
    return result, seen.get("where")


def _case(name, result, where, which) -> Case:
    single = isinstance(result, Tensor)
    states = (result,) if single else result
    if not isinstance(states, (tuple, list)) or not states:
        raise type_error(f"{name} must return its state (a tensor) or states (a tuple of tensors); "
                         f"the {which} case returns {type(result).__name__}", where)
    for i, s in enumerate(states):
        if not isinstance(s, Tensor):
            raise type_error(f"{name}: state {i} of the {which} case is a {type(s).__name__}, not a "
                             "tensor computed from the node and p", where)
        if s.is_matrix():
            raise type_error(f"{name}: state {i} of the {which} case is the matrix {s.describe()}; "
                             "a state is a vector", where)
    return Case(tuple(states), single, where)


def trace(recursive: Recursive, weight_shapes: dict, max_children: int, feature_size: int | None = None) -> Trace:
    """Trace both cases of `recursive` (`node.features` of `feature_size`); TypeError/ValueError
    naming the user's line if it cannot be."""
    if not isinstance(recursive, Recursive):
        raise TypeError(f"expected a function decorated with @ct.recursive, got {type(recursive).__name__}")
    name, used, cases = recursive.__name__, set(), {}
    previous, previous_code = _active.ctx, _cell.code
    try:
        for which, leaf in (("leaf", True), ("inner", False)):
            ctx = _Context(recursive, leaf, max_children, Params(weight_shapes, used), cases.get("leaf"),
                           feature_size)
            _active.ctx, _cell.code = ctx, getattr(recursive.fn, "__code__", None)
            result, where = _call(recursive.fn, NodeProxy(ctx), ctx.params)
            cases[which] = _case(name, result, where, which)
    finally:
        _active.ctx, _cell.code = previous, previous_code
    leaf, inner = cases["leaf"], cases["inner"]
    if leaf.single != inner.single or len(leaf.states) != len(inner.states):
        raise value_error(f"{name}: the leaf case returns {_count(leaf)} ({leaf.where}) but the inner "
                          f"case {_count(inner)}", inner.where)
    for i, (a, b) in enumerate(zip(leaf.states, inner.states)):
        if a.shape != b.shape:
            raise value_error(f"{name}: state {i} has shape {a.shape} at a leaf ({leaf.where or a.where}) "
                              f"but {b.shape} at an inner node", inner.where or b.where)
    return Trace(name, max_children, dict(weight_shapes), leaf, inner, used)


def _count(case: Case) -> str:
    return "one tensor" if case.single else f"a tuple of {len(case.states)} states"
