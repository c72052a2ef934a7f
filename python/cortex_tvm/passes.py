"""TIR rewrites used by the schedule primitives (each returns a new PrimFunc).

TVM's s_tir primitives cannot express these on our programs:
`transform_layout` refuses parameter buffers read inside a nested scope
block, and nothing rewrites a data-dependent loop extent.
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


# ----------------------------------------------------------------------------- GPU (schedule/gpu.py)
def _reads_level_offsets(expr) -> bool:
    found = []
    tvm_ffi.structural_walk(expr, (tvm.ir.TensorLoad, lambda ld: found.append(ld)
                                   if ld.source.name == "level_offsets" else None), order="post")
    return bool(found)


def _and_predicate(realize, guard):
    pred = realize.predicate
    new = guard if isinstance(pred, tirx.IntImm) and pred.value else tirx.And(pred, guard)
    return tvm.s_tir.stmt.SBlockRealize(realize.iter_values, new, realize.block)


def _guard_realizes(stmt, guard):
    return tvm_ffi.structural_map(stmt, (tvm.s_tir.stmt.SBlockRealize, lambda r: _and_predicate(r, guard)),
                                  order="post")


def bound_node_loops(func, scope: str, bound):
    """In scope block `scope`, node loops with a data-dependent extent get the host-known extent `bound`.

    `for j in range(lo[l+1] - lo[l])` becomes `for j in range(bound)` and every
    block under it gets the guard `T.where(j < lo[l+1] - lo[l])`.  A GPU grid
    needs this: its size is read on the host, where `level_offsets` (device
    memory) is not readable.  `bound` must be at least every level's size
    (`max_level_size` is).  Returns (new func, number of loops rewritten).
    """
    count = [0]

    def on_for(f):
        if isinstance(f.extent, tirx.IntImm) or not _reads_level_offsets(f.extent):
            return f
        count[0] += 1
        body = _guard_realizes(f.body, f.loop_var < f.extent)
        return tirx.For(f.loop_var, f.min, bound, f.kind, body, f.thread_binding, f.annotations)

    def on_block(b):
        if b.name_hint != scope:
            return b
        body = tvm_ffi.structural_map(b.body, (tirx.For, on_for), order="post")
        return tvm.s_tir.stmt.SBlock(b.iter_vars, b.reads, b.writes, b.name_hint, body, b.init,
                                     b.alloc_buffers, b.match_buffers, b.annotations)

    new = tvm_ffi.structural_map(func, (tvm.s_tir.stmt.SBlock, on_block), order="post")
    return new, count[0]


def persistent_kernel(func, blocks: int, sync_after=("leaves", "level")):
    """One persistent GPU kernel: every `blockIdx.x` loop becomes a grid-stride loop of a single grid.

    The root block's body is wrapped in `for bx in T.thread_binding(blocks,
    "blockIdx.x")`; each inner `for j in T.thread_binding(E, "blockIdx.x")`
    becomes `for j_o in range(ceildiv(E, blocks))` over nodes
    `j = j_o * blocks + bx` (guarded by `j < E`); a grid-wide barrier
    (`T.cuda.grid_sync()`, cooperative groups) ends the body of each block named
    in `sync_after` (the leaves, and each level inside the level loop).
    The function gets the cooperative-launch attribute.
    """
    bx = tirx.Var("bx", "int32")
    G = tirx.IntImm("int32", blocks)
    rewritten = [0]

    def on_for(f):
        if f.kind != tirx.ForKind.THREAD_BINDING or f.thread_binding is None \
                or f.thread_binding.thread_tag != "blockIdx.x":
            return f
        rewritten[0] += 1
        extent = f.extent
        jo = tirx.Var(f.loop_var.name + "_o", "int32")
        j = jo * G + bx
        body = tvm_ffi.structural_map(f.body, (tvm.ir.Var, lambda v: j if v.same_as(f.loop_var) else v),
                                      order="post")
        body = _guard_realizes(body, j < extent)
        return tirx.For(jo, 0, tirx.floordiv(extent + (blocks - 1), G), tirx.ForKind.SERIAL, body)

    def sync():
        return tirx.Evaluate(tirx.call_intrin("", "tirx.cuda.grid_sync"))

    def on_block(b):
        if b.name_hint not in sync_after:
            return b
        return tvm.s_tir.stmt.SBlock(b.iter_vars, b.reads, b.writes, b.name_hint,
                                     tirx.SeqStmt([b.body, sync()]), b.init,
                                     b.alloc_buffers, b.match_buffers, b.annotations)

    def rebind(r):
        # a block with iterators may not read outer loop vars in its body: give the level
        # block an opaque iterator bound to bx and read that instead
        if r.block.name_hint not in sync_after or not r.block.iter_vars:
            return r
        b = r.block
        vbx = tirx.Var("v_bx", "int32")
        sub = tvm_ffi.structural_map(b.body, (tvm.ir.Var, lambda v: vbx if v.same_as(bx) else v), order="post")
        iv = tirx.IterVar(tvm.ir.Range(0, G), vbx, tirx.IterVar.Opaque)
        nb = tvm.s_tir.stmt.SBlock(list(b.iter_vars) + [iv], b.reads, b.writes, b.name_hint, sub, b.init,
                                   b.alloc_buffers, b.match_buffers, b.annotations)
        return tvm.s_tir.stmt.SBlockRealize(list(r.iter_values) + [bx], r.predicate, nb)

    body = tvm_ffi.structural_map(func.body, (tirx.For, on_for), order="post")
    body = tvm_ffi.structural_map(body, (tvm.s_tir.stmt.SBlockRealize, rebind), order="post")
    if not rewritten[0]:
        raise ValueError("persistent_kernel: no loop is bound to blockIdx.x")
    body = tvm_ffi.structural_map(body, (tvm.s_tir.stmt.SBlock, on_block), order="post")
    root = body.block
    iv = tirx.IterVar(tvm.ir.Range(0, G), bx, tirx.IterVar.ThreadIndex, "blockIdx.x")
    grid = tirx.For(bx, 0, G, tirx.ForKind.THREAD_BINDING, root.body, iv)
    root = tvm.s_tir.stmt.SBlock(root.iter_vars, root.reads, root.writes, root.name_hint, grid, root.init,
                                 root.alloc_buffers, root.match_buffers, root.annotations)
    new = tirx.PrimFunc(list(func.params), tvm.s_tir.stmt.SBlockRealize(body.iter_values, body.predicate, root),
                        attrs=func.attrs)
    return new.with_attr("tirx.kernel_launch_params",
                         ["blockIdx.x", "threadIdx.x", "tirx.use_cooperative_launch"])
