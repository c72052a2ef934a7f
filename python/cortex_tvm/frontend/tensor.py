"""Symbolic tensors: what the user's cell computes on while it is traced.

Every operation on a `Tensor` builds a node of an expression graph and checks
its shapes at once, so a mistake is reported at the line that made it.  The
graph is later turned into RA computes (`to_ra`) and evaluated with numpy
(`numpy_levels`).  A tensor has no value, so anything that needs one (an `if` on
it, `float(x)`, a numpy or math function) raises a TypeError naming the line.

Kinds of node (`op`):
  weight  p.<name> (1-D: a vector read elementwise; 2-D: a matrix for `@`)
  embed   p.<name>[node.word], a row of a 2-D weight
  features  node.features, the node's row of the per-node features given with each batch
  child   state `state` of child `j` (zeros for a missing child)
  unary   sigmoid, tanh, relu, exp, neg
  binary  + - * / between tensors of one shape, or a tensor and a Python number
  matvec  W @ x
  piece   part `index` of `count` equal parts of x (ct.split)
  concat  parts one after another (ct.concat)
"""
from __future__ import annotations

import numbers

import numpy as np

from .where import UnsupportedAttribute, Where, caller, type_error, value_error

_UFUNC_OPS = {np.add: "+", np.subtract: "-", np.multiply: "*", np.true_divide: "/"}
SUPPORTED = "+ - * / with tensors and numbers, W @ x, ct.sigmoid/tanh/relu/exp/split/concat"


class Tensor:
    """A symbolic 1-D tensor (or a 2-D weight) inside a traced recursive cell."""

    __slots__ = ("op", "args", "shape", "where", "attrs")
    __array_priority__ = 1000          # numpy defers `array * tensor` to us

    def __init__(self, op: str, args: tuple, shape: tuple, where: Where | None = None, **attrs):
        self.op, self.args, self.shape = op, tuple(args), tuple(shape)
        self.where = where or caller()
        self.attrs = attrs

    def __repr__(self):
        return f"<ct tensor {self.op} {self.shape}>"

    __hash__ = object.__hash__

    @property
    def size(self) -> int:
        return self.shape[0]

    def is_matrix(self) -> bool:
        return self.op == "weight" and len(self.shape) == 2

    def describe(self) -> str:
        """How the user wrote this tensor, for error messages."""
        if self.op == "weight":
            return f"p.{self.attrs['name']}"
        return f"a tensor of shape {self.shape}"

    # -- arithmetic -----------------------------------------------------------------------
    def __add__(self, other): return binary("+", self, other)           # noqa: E704
    def __radd__(self, other): return binary("+", other, self)          # noqa: E704
    def __sub__(self, other): return binary("-", self, other)           # noqa: E704
    def __rsub__(self, other): return binary("-", other, self)          # noqa: E704
    def __mul__(self, other): return binary("*", self, other)           # noqa: E704
    def __rmul__(self, other): return binary("*", other, self)          # noqa: E704
    def __truediv__(self, other): return binary("/", self, other)       # noqa: E704
    def __rtruediv__(self, other): return binary("/", other, self)      # noqa: E704
    def __neg__(self): return unary("neg", self)                        # noqa: E704
    def __pos__(self): return vector(self, "unary +")                   # noqa: E704

    def __matmul__(self, other):
        return matvec(self, other)

    def __rmatmul__(self, other):
        raise type_error(f"{_what(other)} @ {self.describe()}: the left side of @ must be a "
                         "weight matrix p.<name>")

    def __getitem__(self, index):
        if isinstance(index, Word):
            return embed(self, index)
        raise type_error(f"{self.describe()}[{index!r}]: tensors are not indexed while tracing; use "
                         "ct.split(x, k) for parts, or p.<table>[node.word] for an embedding row")

    # -- what a symbolic value cannot do --------------------------------------------------
    def __bool__(self):
        raise type_error("Python control flow (if/while/and/or/not) on a tensor value cannot be traced: "
                         "a recursive model's control flow may depend only on node.is_leaf")

    def _no_value(self, *_, **__):
        raise type_error(f"{self.describe()} has no value while tracing (float(), int(), math.* need "
                         "one); use ct.sigmoid/tanh/relu/exp")

    __float__ = __int__ = __index__ = __complex__ = __array__ = _no_value

    def _no_compare(self, _other):
        raise type_error("comparing tensors cannot be traced: a recursive model's control flow may "
                         "depend only on node.is_leaf")

    __eq__ = __ne__ = __lt__ = __le__ = __gt__ = __ge__ = _no_compare

    def _unsupported(self, *_):
        raise type_error(f"unsupported operation on {self.describe()}; supported: {SUPPORTED}")

    __pow__ = __rpow__ = __floordiv__ = __rfloordiv__ = __mod__ = __rmod__ = _unsupported
    __abs__ = __invert__ = __and__ = __or__ = __xor__ = _unsupported

    def __iter__(self):
        raise type_error(f"{self.describe()} cannot be unpacked or iterated; use ct.split(x, k)")

    def __len__(self):
        return self.shape[0]

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        raise UnsupportedAttribute(f"{self.describe()} has no attribute {name!r} while tracing; "
                                   f"supported: {SUPPORTED} ({caller()})")

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        """numpy scalars (np.float32(2) * x) work; numpy functions on tensors do not."""
        if ufunc in _UFUNC_OPS and method == "__call__" and len(inputs) == 2 and not kwargs:
            return binary(_UFUNC_OPS[ufunc], *inputs)
        raise type_error(f"numpy's {ufunc.__name__} cannot be traced; use the ct.* functions "
                         f"({SUPPORTED})")

    def __array_function__(self, func, types, args, kwargs):
        raise type_error(f"numpy's {func.__name__} cannot be traced; use the ct.* functions ({SUPPORTED})")


def _what(value) -> str:
    return value.describe() if isinstance(value, Tensor) else type(value).__name__


def is_number(value) -> bool:
    """A Python or numpy real number (not a bool: `x * True` is a bug, not a scale)."""
    return isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_))


def vector(x, who: str) -> Tensor:
    """`x` if it is a symbolic 1-D tensor, else a TypeError naming `who` and the line."""
    if not isinstance(x, Tensor):
        raise type_error(f"{who} expects a tensor of the traced cell, got {type(x).__name__} "
                         f"{x!r}"[:200])
    if x.is_matrix():
        raise type_error(f"{who}: {x.describe()} is a matrix {x.shape}; use it as {x.describe()} @ x")
    return x


# ----------------------------------------------------------------------------- node constructors
def unary(fn: str, x) -> Tensor:
    x = vector(x, "ct." + fn if fn != "neg" else "unary -")
    return Tensor("unary", (x,), x.shape, fn=fn)


def binary(op: str, a, b) -> Tensor:
    """a <op> b for tensors of one shape, or a tensor and a number (numbers stay Python floats)."""
    if is_number(a) and is_number(b):
        raise type_error(f"{a!r} {op} {b!r}: no tensor involved")
    for side in (a, b):
        if not is_number(side):
            vector(side, f"operator {op}")
    if is_number(a) or is_number(b):
        number, tensor = (a, b) if is_number(a) else (b, a)
        if float(number) == 0.0 and (op == "+" or (op == "-" and tensor is a)):
            return tensor                  # x + 0, 0 + x, x - 0: Python's sum() starts from 0
        shape = tensor.shape
    else:
        if a.shape != b.shape:
            raise value_error(f"operands of {op} have shapes {a.shape} and {b.shape}")
        shape = a.shape
    a = float(a) if is_number(a) else a
    b = float(b) if is_number(b) else b
    return Tensor("binary", (a, b), shape, fn=op)


def matvec(W, x) -> Tensor:
    if not (isinstance(W, Tensor) and W.is_matrix()):
        raise type_error(f"{_what(W)} @ ...: the left side of @ must be a weight matrix p.<name> "
                         "(a 2-D weight)")
    x = vector(x, f"{W.describe()} @ x")
    if W.shape[1] != x.size:
        raise value_error(f"{W.describe()} @ x: {W.describe()} has shape {W.shape}, so x needs "
                          f"{W.shape[1]} elements, but it has {x.size}")
    return Tensor("matvec", (W, x), (W.shape[0],))


def embed(table: Tensor, _word) -> Tensor:
    if not table.is_matrix():
        raise type_error(f"{table.describe()}[node.word]: an embedding table must be a 2-D weight, "
                         f"{table.describe()} has shape {table.shape}")
    return Tensor("embed", (table,), (table.shape[1],), name=table.attrs["name"])


def split(x, k) -> tuple:
    x = vector(x, "ct.split")
    if not isinstance(k, int) or isinstance(k, bool) or k < 1:
        raise type_error(f"ct.split(x, k): k must be a positive int, got {k!r}")
    if x.size % k:
        raise value_error(f"ct.split(x, {k}): x has {x.size} elements, not a multiple of {k}")
    m = x.size // k
    return tuple(Tensor("piece", (x,), (m,), index=q, count=k) for q in range(k))


def concat(parts) -> Tensor:
    if not isinstance(parts, (list, tuple)) or not parts:
        raise type_error(f"ct.concat expects a non-empty list of tensors, got {parts!r}"[:200])
    parts = tuple(vector(p, "ct.concat") for p in parts)
    return Tensor("concat", parts, (sum(p.size for p in parts),))


class Word:
    """`node.word` of a leaf: usable only as an embedding index, `p.<table>[node.word]`."""

    def _misuse(self, *_, **__):
        raise type_error("node.word can only index an embedding table, as p.<table>[node.word]")

    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __int__ = __index__ = _misuse
    __float__ = __bool__ = __eq__ = __ne__ = __lt__ = __gt__ = __le__ = __ge__ = _misuse
    __hash__ = object.__hash__
