"""Small helpers for writing TIR with TVM's IRBuilder (`tvm.script.ir_builder.tirx`): the
backward's emitters (`adjoint_emit`, `adjoint_weights`) build their loop nests with them."""
from __future__ import annotations

import tvm
import tvm_ffi
from tvm.script.ir_builder import tirx as Tb


def column_chunks(extent, lanes, chunk):
    """chunk(column_of, width, vector) over the columns range(extent): in a loop, whole vectors
    of `lanes` (column_of(lane) = k_outer * lanes + lane, vector=True), then the rest, a
    shorter vector (vector=True unless it is one column: H = 150 on AVX-512 ends in 6 columns,
    which as scalars cost about as much as the 9 whole vectors before them).  A chunk's lanes
    are one T.vectorized loop: LLVM's own vectorizer leaves these loops scalar (their indices
    are not provably consecutive)."""
    extent = int(extent)
    whole = extent // lanes
    if whole:
        with Tb.serial(0, whole) as k_outer:
            chunk(lambda lane: k_outer * lanes + lane, lanes, True)
    if extent % lanes:
        _last_chunk(extent, lanes, chunk)


def chunk_count(extent, lanes) -> int:
    """How many chunks `column_chunks` makes of range(extent)."""
    return -(-int(extent) // lanes)


def nth_chunk(extent, lanes, index, chunk):
    """chunk(column_of, width, vector) for the chunk number `index` (an expression in
    [0, chunk_count)) of `column_chunks`' layout, chosen at run time."""
    extent = int(extent)
    whole = extent // lanes
    if not extent % lanes:
        chunk(lambda lane: index * lanes + lane, lanes, True)
    elif not whole:
        _last_chunk(extent, lanes, chunk)
    else:
        with Tb.If(index < whole):
            with Tb.Then():
                chunk(lambda lane: index * lanes + lane, lanes, True)
            with Tb.Else():
                _last_chunk(extent, lanes, chunk)


def _last_chunk(extent, lanes, chunk):
    """The columns past the whole vectors, one shorter vector (or one column)."""
    whole, rest = extent // lanes, extent % lanes
    chunk(lambda lane: whole * lanes + lane, rest, rest > 1)


def lane_loops(width, vector, body, lanes=None):
    """body(lane) for lane in range(width), a chunk's columns (`column_chunks`): serially, or
    vectorized, one T.vectorized loop per whole vector of `lanes` and one over the columns past
    them.  LLVM keeps each vector of a register tile in a register; a chunk of 22 columns on
    AVX-512 as one vector of 22 it builds element by element through the stack (the training
    forward of TreeLSTM h = 150 4x slower on Sapphire Rapids), and 8-row tiles of 48-column
    vectors went to the stack too (a one-core probe at 4 against 191 GFLOP/s;
    docs/bench-2026-12-06/intel-train/ab.txt)."""
    if not vector:
        with Tb.serial(0, width) as lane:
            body(lane)
        return
    lanes = lanes or width
    for first in range(0, width - width % lanes, lanes):
        with Tb.vectorized(0, lanes) as lane:
            body(first + lane if first else lane)
    first, rest = width - width % lanes, width % lanes
    if rest == 1:
        body(tvm.tirx.const(first, "int32"))
    elif rest:
        with Tb.vectorized(0, rest) as lane:
            body(first + lane if first else lane)


def vector_loop(extent, lanes, body):
    """body(k) for k in range(extent), in `column_chunks`."""
    def chunk(column_of, width, vector):
        lane_loops(width, vector, lambda lane: body(column_of(lane)), lanes)
    column_chunks(extent, lanes, chunk)


def unravel(flat, extents) -> list:
    """The indices of the flat index `flat` (an expression) over a grid of `extents`, row-major."""
    index = []
    for extent in reversed(extents):
        index.insert(0, flat % extent)
        flat = flat // extent
    return index


def row_elements(shape, lanes, body):
    """body(index list) for every element of `shape` (one array row), its last axis in
    `vector_loop`s of `lanes`, the others in a grid."""
    def rows(ix):
        vector_loop(shape[-1], lanes, lambda k: body(ix + [k]))
    if len(shape) == 1:
        rows([])
    else:
        with Tb.grid(*shape[:-1]) as ix:
            rows(as_list(ix))


def axes_grid(axes, body):
    """body({var: loop var}) inside one loop per (var, extent) of `axes`; body({}) for none."""
    if not axes:
        body({})
        return
    with Tb.grid(*[ext for _, ext in axes]) as loops:
        body(dict(zip([v for v, _ in axes], as_list(loops))))


def values_of(mapping: dict, axes) -> list:
    """mapping's value for each (var, extent) of `axes` (TIR variables compare by `same_as`)."""
    return [next(value for key, value in mapping.items() if key.same_as(var)) for var, _ in axes]


def uses(e, var) -> bool:
    found = []
    tvm_ffi.structural_walk(e, (tvm.ir.Var, lambda v: found.append(v.same_as(var))), order="post")
    return any(found)


def substitute(e, mapping: dict):
    """`e` with every variable in `mapping` replaced by its value (a TIR expression or statement)."""
    return tvm_ffi.structural_map(e, (tvm.ir.Var, lambda v: mapping.get(v, v)), order="post")


def var_dtype(e) -> str:
    """The dtype of a TIR variable or expression ("int32", "float32x16")."""
    return str(e.ty)


def as_list(loops):
    return [loops] if isinstance(loops, tvm.ir.Var) else list(loops)
