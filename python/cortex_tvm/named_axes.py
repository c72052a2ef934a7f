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
    a2 = np.transpose(a, [a_axes.index(x) for x in batch + a_free + summed]).reshape(
        prod(batch), prod(a_free), prod(summed))
    b2 = np.transpose(b, [b_axes.index(x) for x in batch + summed + b_free]).reshape(
        prod(batch), prod(summed), prod(b_free))
    # numpy hands a 2-D product to BLAS whatever the strides; a stacked one only when contiguous
    product = np.dot(a2[0], b2[0])[None] if a2.shape[0] == 1 else np.matmul(a2, b2)
    result = product.reshape([sizes[x] for x in batch + a_free + b_free])
    return result, batch + a_free + b_free


def _size(axes, extents) -> int:
    return int(np.prod([extents.get(a) or 1 for a in axes], dtype=np.int64))


def times_missing(result, parts, reduce_axes, extents):
    """A sum over an axis no part varies along adds the same term `extent` times."""
    seen = union(*(p[1] for p in parts))
    scale = int(np.prod([extents[a] for a in reduce_axes if a not in seen], dtype=np.int64))
    return (result[0] * np.float32(scale), result[1]) if scale != 1 else result
