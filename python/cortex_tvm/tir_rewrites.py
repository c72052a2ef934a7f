"""TIR rewrites used by the schedule primitives (each returns a new PrimFunc).

Plain functions from PrimFunc to PrimFunc, not `tvm.transform` passes (this module was
`passes.py`).  TVM's s_tir primitives cannot express these on our programs:
`transform_layout` refuses parameter buffers read inside a nested scope
block, and nothing rewrites a data-dependent loop extent.  The rewrites for a GPU grid
are in `gpu_rewrites.py`.
"""
from __future__ import annotations

import numpy as np
import tvm
import tvm_ffi
from tvm import te, tirx


def _map_loads_and_regions(func, buffer, new_buffer, index_fn, keep_param=False):
    """Point every load of `buffer` at `new_buffer` with indices `index_fn(*old)`; the parameter
    itself becomes `new_buffer` unless `keep_param`."""

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
    if keep_param:
        return func
    return tvm_ffi.structural_map(func, (tvm.ir.Var, lambda v: new_buffer if v.same_as(buffer) else v),
                                  order="post")


def packed_shape(shape, index_fn) -> tuple:
    """Shape of the packed array: one past the largest index `index_fn` gives on `shape`."""
    out = index_fn(*np.indices(shape))
    return tuple(int(np.max(o)) + 1 for o in out)


def tile_axis(axis: int, tile: int, groups: int = 1, extent: int | None = None):
    """Index map moving `axis` into (axis // tile) first and (axis % tile) last.

    With `groups` > 1 the axis (of length `extent`) is `groups` blocks of
    rows (e.g. the five gates of an LSTM); tile t then holds rows
    [t*tile, (t+1)*tile) of every block side by side:
    a = g * (extent // groups) + i  ->  (i // tile, ..., g * tile + i % tile).
    """
    def index_fn(*idx):
        a = idx[axis]
        rest = [x for d, x in enumerate(idx) if d != axis]
        if groups == 1:
            return (a // tile, *rest, a % tile)
        block = extent // groups
        return ((a % block) // tile, *rest, (a // block) * tile + a % tile)
    return index_fn


def untile_axis(axis: int, tile: int, groups: int = 1, extent: int | None = None):
    """The inverse of `tile_axis`: a packed index -> the index it came from."""
    def index_fn(*packed):
        first, *rest, last = packed
        if groups == 1:
            a = first * tile + last
        else:
            a = (last // tile) * (extent // groups) + first * tile + last % tile
        return (*rest[:axis], a, *rest[axis:])
    return index_fn


def _buffer(name, shape, dtype):
    # align = element size: callers pass numpy arrays, which are not 64-byte aligned
    return tirx.decl_buffer(shape, dtype, name=name, data_alignment=4)


def pack_buffer(func, name: str, index_fn, packed_name: str):
    """Replace parameter `name` by the packed `packed_name`; loads W[i] become WP[index_fn(i)]."""
    buffer = _param(func, name)
    new_buffer = _buffer(packed_name, packed_shape([int(d) for d in buffer.shape], index_fn), buffer.dtype)
    return _map_loads_and_regions(func, buffer, new_buffer, index_fn)


#: how a bfloat16 weight is stored: its 16 bits in a uint16 array (numpy has no bfloat16,
#: and TVM's own bf16 legalization is not needed to move bits)
BF16_STORAGE = "uint16"


def bf16_bits32(value):
    """float32 expression -> its bfloat16 bits in the low half of a uint32, rounded to nearest,
    ties to even (for finite values: weights are; `load_weights` refuses NaN and inf)."""
    bits = tirx.reinterpret("uint32", value)
    lsb = (bits >> tirx.const(16, "uint32")) & tirx.const(1, "uint32")
    return (bits + tirx.const(0x7FFF, "uint32") + lsb) >> tirx.const(16, "uint32")


def bf16_encode(value):
    """float32 expression -> its bfloat16 bits (uint16): `bf16_bits32` stored in 16 bits."""
    return tirx.Cast(BF16_STORAGE, bf16_bits32(value))


def bf16_decode(bits):
    """bfloat16 bits (uint16 expression) -> float32: the bits become the float's upper half."""
    return tirx.reinterpret("float32", tirx.Cast("uint32", bits) << tirx.const(16, "uint32"))


def store_bf16(func, name: str):
    """Parameter `name` (float32) becomes a uint16 array of bfloat16 bits of the same shape:
    loads decode to float32 where they are read, stores (a parameter transform writing the
    array) encode, rounding to nearest even."""
    buffer = _param(func, name)
    if buffer.dtype != "float32":
        raise ValueError(f"{name!r} is {buffer.dtype}, not float32")
    new_buffer = tirx.decl_buffer(buffer.shape, BF16_STORAGE, name=name, data_alignment=2)

    def on_load(ld):
        if ld.source.same_as(buffer):
            return bf16_decode(tirx.BufferLoad(new_buffer, list(ld.indices)))
        return ld

    def on_region(r):
        if r.source.same_as(buffer):
            return tirx.BufferRegion(new_buffer, list(r.region))
        return r

    def on_store(st):
        if st.buffer.same_as(buffer):
            return tirx.BufferStore(new_buffer, bf16_encode(st.value), list(st.indices))
        return st

    func = tvm_ffi.structural_map(func, [(tvm.ir.TensorLoad, on_load), (tvm.ir.TensorRegion, on_region),
                                         (tirx.BufferStore, on_store)], order="post")
    return tvm_ffi.structural_map(func, (tvm.ir.Var, lambda v: new_buffer if v.same_as(buffer) else v),
                                  order="post")


def pack_block(weight: str) -> str:
    """The name of the block that writes `weight`'s packed copy in the transform function."""
    return f"pack_{weight}"


def add_pack(transform, raw_spec, packed_name: str, index_fn, inverse_fn, func_name: str):
    """The transform function with one more output: `packed_name`, the weight `raw_spec` =
    (name, shape, dtype) laid out by `index_fn`, written first (its block: `pack_block(name)`).
    Its own reads of the weight (a leaf table's) move to the packed copy.  `transform` None:
    a new function `func_name` holding just the pack."""
    name, shape, dtype = raw_spec
    packed = _buffer(packed_name, packed_shape(shape, index_fn), dtype)
    params = [] if transform is None else list(transform.params)
    raw = next((p for p in params if p.name == name), None)
    if raw is None:
        raw = _buffer(name, shape, dtype)
        params.insert(0, raw)
    else:
        transform = _map_loads_and_regions(transform, raw, packed, index_fn, keep_param=True)
    source = te.placeholder(shape, dtype, name=name)
    target = te.compute(packed.shape, lambda *p: source[inverse_fn(*p)], name=pack_block(name))
    made = te.create_prim_func([source, target])
    swap = {made.params[0]: raw, made.params[1]: packed}
    nest = tvm_ffi.structural_map(made.body.block.body, (tvm.ir.Var, lambda v: swap.get(v, v)), order="post")
    if transform is None:
        body, allocs, attrs = nest, [], {"global_symbol": func_name, "tirx.noalias": True}
    else:
        root = transform.body.block
        body, allocs, attrs = tirx.SeqStmt([nest, root.body]), root.alloc_buffers, dict(transform.attrs)
    block = tvm.s_tir.stmt.SBlock([], [], [], "root", body, None, allocs, [], {})
    func = tirx.PrimFunc(params + [packed], tvm.s_tir.stmt.SBlockRealize([], True, block))
    for key, value in attrs.items():
        func = func.with_attr(key, value)
    return func


def buffer_params(func) -> list:
    """(name, shape, dtype) of each buffer parameter, in order (int extents as ints)."""
    return [(p.name, tuple(int(d) if isinstance(d, tirx.IntImm) else str(d) for d in p.shape), str(p.dtype))
            for p in func.params if hasattr(p.ty, "shape")]


def written_params(func) -> set:
    """Names of the parameters `func` stores to."""
    params, written = {p.name for p in func.params}, set()

    def on_store(st):
        if st.buffer.name in params:
            written.add(st.buffer.name)
    tvm_ffi.structural_walk(func, (tirx.BufferStore, on_store), order="pre")
    return written


def _param(func, name):
    for p in func.params:
        if p.name == name:
            return p
    raise ValueError(f"no parameter named {name!r}; parameters are {[p.name for p in func.params]}")


def is_level_offset_load(e) -> bool:
    return isinstance(e, tvm.ir.TensorLoad) and e.source.name == "level_offsets"


def is_level_size(e) -> bool:
    """Whether `e` is a level's size, `level_offsets[l + 1] - level_offsets[l]`."""
    return isinstance(e, tvm.ir.prim.expr.Sub) and is_level_offset_load(e.a) and is_level_offset_load(e.b)


def whole_region(buffer):
    """The region of all of `buffer` (a block's read or write of it, whole)."""
    return tirx.BufferRegion(buffer, [tvm.ir.Range.from_min_extent(0, d) for d in buffer.shape])


def pad_level_extents(func, multiple: int):
    """Level sizes `lo[l+1] - lo[l]` become `(lo[l+1] - lo[l]) // multiple * multiple`.

    The values are equal when the linearizer pads every level to a multiple
    (the runtime does), but TVM can now prove that a node loop split by
    `multiple` is exact, so no bounds check is left inside the node tile.
    """
    def on_sub(e):
        if is_level_size(e):
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
        if isinstance(first_index, tvm.ir.prim.expr.Add) and is_level_offset_load(first_index.a):
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
