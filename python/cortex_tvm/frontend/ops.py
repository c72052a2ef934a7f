"""The functions a traced cell computes with: ct.sigmoid, tanh, relu, exp, split, concat.

Each takes symbolic tensors (see `tensor.py`) and returns new ones; they
exist only while a `@ct.recursive` cell is traced, and record the line that
called them.
"""
from __future__ import annotations

from . import tensor as _t

__all__ = ["sigmoid", "tanh", "relu", "exp", "split", "concat"]


def sigmoid(x):
    """Elementwise logistic function, 1 / (1 + exp(-x)).  Example: ``o = ct.sigmoid(o)``."""
    return _t.unary("sigmoid", x)


def tanh(x):
    """Elementwise hyperbolic tangent.  Example: ``h = ct.tanh(p.W @ x + p.b)``."""
    return _t.unary("tanh", x)


def relu(x):
    """Elementwise max(x, 0).  Example: ``h = ct.relu(p.W @ x + p.b)``."""
    return _t.unary("relu", x)


def exp(x):
    """Elementwise exponential.  Example: ``e = ct.exp(x)``."""
    return _t.unary("exp", x)


def split(x, k: int) -> tuple:
    """`k` equal consecutive parts of a vector (its length must be a multiple of k).

    Example: ``i, o, u = ct.split(p.W @ x + p.b, 3)`` (rows [i; o; u] of W).
    """
    return _t.split(x, k)


def concat(parts) -> "_t.Tensor":
    """The vectors of `parts` one after another.  Example: ``x = ct.concat([hl, hr])``."""
    return _t.concat(parts)
