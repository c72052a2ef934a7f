"""What a compiled model's call and `vjp` are given, checked before it is used: one kind of
input (trees, or a forest's arrays) before the forward, and a pullback's adjoint (its shape,
finite) before the backward; and the pullback `vjp` gives back (`Pullback`)."""
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


class Pullback:
    """`CompiledModel.vjp`'s pullback: called with the outputs' adjoint (and word_rows=True for
    the embeddings' batch rows only), the gradients, `fn(d_out, rows)`; `word_rows`, the rows
    each embedding's gradient can be nonzero on (`adjoint.Adjoint.word_rows`), found the first
    time it is read: a np.unique over the batch's words, about 0.19 ms of a training step (a
    profile) that the dense path never reads; `rows`: those rows where the caller found them."""

    def __init__(self, fn, adjoint, lin, rows=None):
        self._fn, self._adjoint, self._lin, self._rows = fn, adjoint, lin, rows

    @property
    def word_rows(self) -> dict:
        if self._rows is None:
            self._rows = self._adjoint.word_rows(self._lin)
        return self._rows

    def __call__(self, d_out, word_rows: bool = False) -> dict:
        return self._fn(d_out, self.word_rows if word_rows else None)
