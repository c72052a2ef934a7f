"""TIR rewrites used by the schedule primitives (each returns a new PrimFunc).

TVM's s_tir primitives cannot express these on our programs:
`transform_layout` refuses parameter buffers read inside a nested scope
block, and nothing rewrites a data-dependent loop extent.
"""
from __future__ import annotations

import numpy as np
import tvm
import tvm_ffi
from tvm import tirx


def _map_loads_and_regions(func, buffer, new_buffer, index_fn):
    """Point every load of `buffer` at `new_buffer` with indices `index_fn(*old)`."""

    def on_load(ld):
        if ld.source.same_as(buffer):
            return tirx.BufferLoad(new_buffer, list(index_fn(*ld.indices)))
        return ld

    def on_region(r):
        if r.source.same_as(buffer):   # the whole new buffer: regions are only hints here
            return tirx.BufferRegion(new_buffer, [tvm.ir.Range.from_min_extent(0, d) for d in new_buffer.shape])
        return r

    def on_store(st):
        if st.buffer.same_as(buffer):
            raise ValueError(f"cannot repack {buffer.name!r}: it is written by the program")
        return st

    func = tvm_ffi.structural_map(func, [(tvm.ir.TensorLoad, on_load), (tvm.ir.TensorRegion, on_region),
                                         (tirx.BufferStore, on_store)], order="post")
    return tvm_ffi.structural_map(func, (tvm.ir.Var, lambda v: new_buffer if v.same_as(buffer) else v),
                                  order="post")


def packed_shape(shape, index_fn) -> tuple:
    """Shape of the packed array: one past the largest index `index_fn` gives on `shape`."""
    out = index_fn(*np.indices(shape))
    return tuple(int(np.max(o)) + 1 for o in out)


def pack_array(array: np.ndarray, index_fn) -> np.ndarray:
    """`out[index_fn(*i)] = array[i]` for every index i (numpy evaluates the same lambda)."""
    idx = tuple(np.asarray(i) for i in index_fn(*np.indices(array.shape)))
    shape = tuple(int(i.max()) + 1 for i in idx)
    if np.unique(np.ravel_multi_index(idx, shape)).size != array.size:
        raise ValueError("pack: the index map sends two elements to the same place")
    out = np.zeros(shape, array.dtype)
    out[idx] = array
    return out


def tile_axis(axis: int, tile: int):
    """Index map moving `axis` into (axis // tile) first and (axis % tile) last."""
    def index_fn(*idx):
        a = idx[axis]
        rest = [x for d, x in enumerate(idx) if d != axis]
        return (a // tile, *rest, a % tile)
    return index_fn


def pack_buffer(func, name: str, index_fn):
    """Replace parameter `name` by a packed buffer; loads W[i] become WP[index_fn(i)]."""
    buffer = _param(func, name)
    shape = packed_shape([int(d) for d in buffer.shape], index_fn)
    new_buffer = tirx.decl_buffer(shape, buffer.dtype, name=name, data_alignment=4)
    return _map_loads_and_regions(func, buffer, new_buffer, index_fn)


def _param(func, name):
    for p in func.params:
        if p.name == name:
            return p
    raise ValueError(f"no parameter named {name!r}; parameters are {[p.name for p in func.params]}")


def _is_level_offset_load(e):
    return isinstance(e, tvm.ir.TensorLoad) and e.source.name == "level_offsets"


def pad_level_extents(func, multiple: int):
    """Level sizes `lo[l+1] - lo[l]` become `(lo[l+1] - lo[l]) // multiple * multiple`.

    The values are equal when the linearizer pads every level to a multiple
    (the runtime does), but TVM can now prove that a node loop split by
    `multiple` is exact, so no bounds check is left inside the node tile.
    """
    def on_sub(e):
        if _is_level_offset_load(e.a) and _is_level_offset_load(e.b):
            return tirx.floordiv(e, multiple) * multiple
        return e
    return tvm_ffi.structural_map(func, (tvm.ir.prim.expr.Sub, on_sub), order="post")


def find_alloc(func, name: str):
    """The block-allocated buffer called `name`, or None."""
    found = []

    def on_block(b):
        found.extend(buf for buf in b.alloc_buffers if buf.name == name)
    tvm_ffi.structural_walk(func, (tvm.s_tir.stmt.SBlock, on_block), order="post")
    return found[0] if found else None


def dense_index(func, name: str, max_level_size, min_rows: int):
    """Scratchpad `name[level_offsets[l] + j, ...]` becomes `name[j, ...]`.

    The index through the level-offset array (non-affine in the loop
    variables) becomes the node's position in its level (affine), and the
    allocation shrinks from every slot to the largest level, at least
    `min_rows` rows (so a node tile of up to that many rows provably fits and
    TVM compacts it to a constant-size buffer).  Raises ValueError if some
    access is not of that form.
    """
    old = find_alloc(func, name)
    if old is None:
        raise ValueError(f"no scratchpad named {name!r}")
    rows = tirx.max(max_level_size, min_rows)
    new = tirx.decl_buffer([rows] + list(old.shape[1:]), old.dtype, name=name)

    def position(first_index):
        if isinstance(first_index, tvm.ir.prim.expr.Add) and _is_level_offset_load(first_index.a):
            return first_index.b
        raise ValueError(f"{name!r} is accessed at {first_index}, not at level_offsets[l] + position")

    def on_load(ld):
        if ld.source.same_as(old):
            return tirx.BufferLoad(new, [position(ld.indices[0])] + list(ld.indices[1:]))
        return ld

    def on_store(st):
        if st.buffer.same_as(old):
            return tirx.BufferStore(new, st.value, [position(st.indices[0])] + list(st.indices[1:]))
        return st

    def on_region(r):
        if r.source.same_as(old):
            first = r.region[0]
            region = [tvm.ir.Range.from_min_extent(position(first.min), first.extent)] + list(r.region[1:])
            return tirx.BufferRegion(new, region)
        return r

    func = tvm_ffi.structural_map(func, [(tvm.ir.TensorLoad, on_load), (tirx.BufferStore, on_store),
                                         (tvm.ir.TensorRegion, on_region)], order="post")
    return tvm_ffi.structural_map(func, (tvm.ir.Var, lambda v: new if v.same_as(old) else v), order="post")


def param(func, name: str):
    """The parameter called `name` (buffer or scalar var)."""
    return _param(func, name)
