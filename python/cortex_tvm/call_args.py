"""What a compiled model's call and `vjp` are given, checked before it is used: one kind of
input (trees, or a forest's arrays) before the forward, and a pullback's adjoint (its shape,
finite) before the backward."""
from __future__ import annotations

import numpy as np


class NoTrees:
    """The default of `trees` in __call__ and vjp: given nothing (None is a bad batch, refused by
    the linearizer); its repr keeps the generated API reference the same from run to run."""

    def __repr__(self):
        return "<no trees>"


NO_TREES = NoTrees()


def one_input(trees, parents, words, prefix: str) -> None:
    """ValueError unless exactly one of trees and parents= (with words=) was given."""
    if (trees is NO_TREES) == (parents is None) or (words is not None and parents is None):
        raise ValueError(f"{prefix}call with trees (a list of Nodes) or with parents= and words= (arrays), "
                         "exactly one of the two")


def adjoint_array(d_out, shape, what, concatenate) -> np.ndarray:
    """d_out as one float32 array of `shape`; ValueError naming what was expected otherwise."""
    if concatenate and isinstance(d_out, (list, tuple)):
        d_out = np.concatenate([np.asarray(d, np.float32) for d in d_out]) if d_out else np.zeros(shape)
    array = np.asarray(d_out, dtype=np.float32)
    if array.shape != shape:
        raise ValueError(f"vjp: the adjoint of the {what} must have shape {shape}, got {array.shape}")
    if not np.isfinite(array).all():
        raise ValueError(f"vjp: the adjoint of the {what} holds NaN or infinity")
    return array
