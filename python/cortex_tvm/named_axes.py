"""Arrays whose dimensions carry names: the values `stage_numpy` computes with.

A value is a pair (array, axes): `axes` names the array's dimensions, one axis name each
(a block's loop variables: "v_i0" over the level's nodes, "v_k" over a reduction), so values
over different axes broadcast by name instead of by position.  Example::

    a = (np.ones((5, 3)), ("g", "k"))           # a weight read W[g, k]
    b = (np.ones((4, 3)), ("n", "k"))           # a state read h[n, k]
    contract([a, b], ("n", "g"), extents)       # sum over k of a * b: one matrix product, axes ("g", "n")
"""
from __future__ import annotations

import numpy as np


def expand(value, axes: tuple):
    """`value` (array, its axes) as an array broadcastable over `axes` (a superset of its axes)."""
    array, own = value
    if own == axes:
        return array
    order = [own.index(a) for a in axes if a in own]
    array = np.transpose(array, order) if order != list(range(len(order))) else array
    return array.reshape([array.shape[order.index(own.index(a))] if a in own else 1 for a in axes])


def union(*axes_lists) -> tuple:
    out = []
    for axes in axes_lists:
        out.extend(a for a in axes if a not in out)
    return tuple(out)


def elementwise(fn, *values):
    axes = union(*(v[1] for v in values))
    return fn(*(expand(v, axes) for v in values)), axes


def reduce_to(value, keep: tuple):
    """`value` summed over its axes not in `keep`, returned over `keep` (broadcast where missing)."""
    array, axes = value
    drop = tuple(i for i, a in enumerate(axes) if a not in keep)
    if drop:
        array = array.sum(axis=drop)
        axes = tuple(a for a in axes if a in keep)
    return array, axes


def contract(values: list, out: tuple, extents: dict):
    """sum over every axis not in `out` of the product of `values`: pairwise, the last pair as a
    batched matrix product.  An axis that is in `out` but in none of the values is broadcast by the
    caller; one in none of them and not in `out` is not seen here (see `missing_extent`)."""
    values = [reduce_to(v, union(out, *(w[1] for w in values if w is not v))) for v in values]
    while len(values) > 2:
        # multiply the pair whose broadcast is smallest first
        best = min(((i, j) for i in range(len(values)) for j in range(i + 1, len(values))),
                   key=lambda ij: _size(union(values[ij[0]][1], values[ij[1]][1]), extents))
        a, b = values[best[0]], values[best[1]]
        values = [v for k, v in enumerate(values) if k not in best] + [elementwise(np.multiply, a, b)]
        values = [reduce_to(v, union(out, *(w[1] for w in values if w is not v))) for v in values]
    if len(values) == 1:
        return reduce_to(values[0], out)
    (a, a_axes), (b, b_axes) = values
    batch = tuple(x for x in a_axes if x in b_axes and x in out)
    summed = tuple(x for x in a_axes if x in b_axes and x not in out)
    a_free = tuple(x for x in a_axes if x not in b_axes)
    b_free = tuple(x for x in b_axes if x not in a_axes)
    sizes = {x: n for x, n in zip(a_axes, a.shape)}
    sizes.update(zip(b_axes, b.shape))

    def prod(axes):
        return int(np.prod([sizes[x] for x in axes], dtype=np.int64))

    if not batch:
        a2, b2 = _matrix(a, a_axes, a_free, summed, prod), _matrix(b, b_axes, summed, b_free, prod)
        if out and out[0] in b_free:             # the result in the order the caller keeps
            return np.dot(b2.T, a2.T).reshape([sizes[x] for x in b_free + a_free]), b_free + a_free
        return np.dot(a2, b2).reshape([sizes[x] for x in a_free + b_free]), a_free + b_free
    a3 = np.transpose(a, [a_axes.index(x) for x in batch + a_free + summed]).reshape(
        prod(batch), prod(a_free), prod(summed))
    b3 = np.transpose(b, [b_axes.index(x) for x in batch + summed + b_free]).reshape(
        prod(batch), prod(summed), prod(b_free))
    result = np.matmul(a3, b3).reshape([sizes[x] for x in batch + a_free + b_free])
    return result, batch + a_free + b_free


def _matrix(array, axes, rows, cols, prod):
    """`array` as a (rows, cols) matrix: a view where its axes are rows then cols, or cols then rows
    (a transposed view, which BLAS reads as such), a copy otherwise."""
    if axes == rows + cols:
        return array.reshape(prod(rows), prod(cols))
    if axes == cols + rows:
        return array.reshape(prod(cols), prod(rows)).T
    return np.transpose(array, [axes.index(x) for x in rows + cols]).reshape(prod(rows), prod(cols))


def _size(axes, extents) -> int:
    return int(np.prod([extents.get(a) or 1 for a in axes], dtype=np.int64))


def times_missing(result, parts, reduce_axes, extents):
    """A sum over an axis no part varies along adds the same term `extent` times."""
    seen = union(*(p[1] for p in parts))
    scale = int(np.prod([extents[a] for a in reduce_axes if a not in seen], dtype=np.int64))
    return (result[0] * np.float32(scale), result[1]) if scale != 1 else result
