"""The backward's weight gradients as TIR, for the weights every level reads alike.

A block whose weight reads do not depend on the node (TreeLSTM's ``U[g*H + i, j*H + k]`` in
``gates_sum``, ``bU[g*H + i]`` in ``gates``) has, for each such read, a gradient that is a sum
over all of the stage's nodes: for U, ``R[g, i, j, k] = sum_n d_gates_sum[n, g, i] *
h[children[n, j], k]``, one matrix product.  `emit_weight_read` adds that sum's loop nest to the
backward function (`adjoint_kernel.level_pass`), after the levels, into an array over the
read's own axes (`R`, no two iterations write one element, so its tiles run in parallel);
`index_arrays` says where each element of `R` goes in the weight, and `adjoint.py` adds it
there (`adjoint_numpy.scatter_invariant`: a reshape for U).  A block that reads a weight through the node
(an embedding row per word, `emb[word[offset + n], e]`) has its adjoint written by the level pass
as one row per node (added into the table by word at the end: `adjoint_kernel._emit_add_rows`); a read
through the node of another form leaves its block to the numpy weight pass.

The nest tiles the read's largest outer axis by TILE (8 values of i for U) and its last axis by
chunks of vectors (`StageEmitter.vectors` a row: 2 on AVX-512 CPUs with two FMA units).  Where
the summand is a product of a factor without the vector axis and one without the tiled axis
(U's, the leaf W's), it is a packed matrix product over panels of both factors
(`adjoint_packed.emit_packed`, float32 or bfloat16 pairs).  Any other summand (a bias's: the
adjoint alone) is read where it lies, in blocks of NODES_PER_BLOCK nodes, whose rows stay in the
cache while every tile adds them in::

    for i_tile (parallel), node_block, g, j, k_chunk:
        acc[t, lane] = R[g, 8*i_tile + t, j, k] if node_block else 0
        for n in node_block:  acc[t, lane] += coeff(n, g, 8*i_tile + t, j, k)
        R[g, 8*i_tile + t, j, k] = acc[t, lane]

Either way the first block of nodes starts the sums: the caller does not zero `R`.
"""
from __future__ import annotations

import functools

import numpy as np
import tvm
import tvm_ffi
from tvm import tirx
from tvm.script.ir_builder import tirx as Tb

from . import adjoint_bf16
from .adjoint_emit import Unsupported
from .adjoint_nest import POSITION, ROW
from .adjoint_packed import TILE, emit_packed, node_blocks, started
from .tir_builder import axes_grid, column_chunks, lane_loops, uses

#: nodes summed per pass over `out`'s tiles (their rows of the adjoints and child states stay in L2)
NODES_PER_BLOCK = 32


def weight_blocks(emitter) -> list:
    """The blocks of the stage whose weight reads are node-independent, or through the node's
    input in `StageEmitter.gather_input`'s form (those go to `emitter.gathered`), with what
    their nests need for the node-independent ones: [(block, stand-in for the block's adjoint
    buffer, [(read, d out/d read times the stand-in's element, the read's axes)])]."""
    found = []
    for block in emitter.blocks:
        weight_loads = []
        tvm_ffi.structural_walk(block.body, (tvm.ir.TensorLoad, lambda ld: weight_loads.append(ld)
                                             if emitter.weight_of(ld.source) is not None else None), order="post")
        through_node = [(ld, emitter.gather_input(block, ld)) for ld in weight_loads if emitter.reads_node(ld)]
        if not weight_loads or any(node_input is None for _, node_input in through_node):
            continue
        stand_in = tirx.decl_buffer(block.out.shape, block.out.dtype, name=f"d_{block.out.name}")
        emitter.weight_sinks = True
        try:
            adj_out = tirx.BufferLoad(stand_in, [ROW] + list(block.out_indices[1:]))
            value = tirx.BufferLoad(block.out, [block.position] + list(block.out_indices[1:]))
            reads = [(load, coeff, read_axes(block, load))
                     for load, coeff in emitter.partials(block.body, adj_out, (block.body, value))]
            for load, _, axes in reads:
                index_arrays(load, axes)
        except Unsupported:
            continue
        finally:
            emitter.weight_sinks = False
        found.append((block, stand_in, reads))
        # the reads through the node: the level pass writes each node's adjoint row
        emitter.gathered.extend((block, load, node_input) for load, node_input in through_node)
    return found


def read_axes(block, load) -> list:
    """The block's axes a read's indices use, (var, extent), in the block's order except the
    last of those its last index uses (k in U[g*H + i, j*H + k]: the vector of lanes), which
    comes last."""
    used = block.used_axes(load.indices)
    last = [a for a in used if uses(load.indices[-1], a[0])][-1:]
    return [a for a in used if a not in last] + last


def index_arrays(load, axes) -> list:
    """Each index of the read as an integer array over `axes` (broadcastable): where each
    element of the read's array goes in the weight.  Unsupported for an index that is not made
    of the axes, constants, + - * and floor division."""
    values = {}
    for d, (v, ext) in enumerate(axes):
        shape = [1] * len(axes)
        shape[d] = int(ext)
        values[v] = np.arange(int(ext), dtype=np.int64).reshape(shape)

    def ev(e):
        if isinstance(e, tvm.tirx.IntImm):
            return int(e.value)
        if isinstance(e, tirx.Var):
            for v, array in values.items():
                if v.same_as(e):
                    return array
            raise Unsupported(f"the weight index {e} reads a variable that is not an axis")
        ops = {tirx.Add: np.add, tirx.Sub: np.subtract, tirx.Mul: np.multiply, tirx.FloorDiv: np.floor_divide,
               tirx.FloorMod: np.mod}
        for kind, fn in ops.items():
            if isinstance(e, kind):
                return fn(ev(e.a), ev(e.b))
        raise Unsupported(f"the weight index {e} is not affine")
    return [np.asarray(ev(i)) for i in load.indices]


def with_adjoint(e, stand_in, adj):
    """`e` reading the block's adjoint array `adj` where it reads `weight_blocks`' stand-in."""
    return tvm_ffi.structural_map(e, (tvm.ir.TensorLoad, lambda ld: tirx.BufferLoad(adj, list(ld.indices))
                                      if ld.source.same_as(stand_in) else ld), order="post")


def emit_weight_read(emitter, block, stand_in, load, coeff, axes, out, bufs, offset, count):
    """Add the nest filling `out` (over `axes`) with the read's gradient summed over the stage's
    nodes [offset, offset + count) (rows 0 ..) and the block's other axes; parallel over the
    tiles of `out` (no two write one element).  A summand that is a product of a factor without
    the vector axis and one without the tiled axis (TreeLSTM's dU: ``d_gates_sum[n, g, i] *
    h[children[n, j], k]``) takes the packed nest (`adjoint_packed.emit_packed`); any other the nest
    below, which reads both factors where they lie."""
    summed = block.summed_axes(axes)
    inner = axes[-1] if uses(load.indices[-1], axes[-1][0]) else None
    outer = [a for a in axes if inner is None or not a[0].same_as(inner[0])]
    tiled = max(outer, key=lambda a: int(a[1])) if outer else None
    others = [a for a in outer if tiled is None or not a[0].same_as(tiled[0])]
    extent = int(tiled[1]) if tiled else 1
    adj = bufs["adj"][block.key]
    width = emitter.lanes * emitter.vectors

    def rewrite(e, mapping, n):
        mapping = {**mapping, block.position: n, ROW: n, POSITION: n}
        return emitter.rewrite(with_adjoint(e, stand_in, adj), bufs, mapping, offset, count,
                               inner[0] if inner else None)

    factors = _factors(coeff, tiled, inner) if not summed else None
    if factors is not None:
        emit_packed(rewrite, *factors, tiled, inner, others, axes, out, count, emitter.lanes, width, emitter.shares,
                    pairs=adjoint_bf16.takes_pairs(emitter), amx=emitter.amx)
        return
    tile_size = TILE if tiled else 1

    def at_tile(tile, t):
        return {tiled[0]: tirx.min(tile * TILE + t, extent - 1)} if tiled else {}

    def columns(mapping, tile, node_block, column_of, count_, vector):
        """out's tile rows x one chunk of columns, in registers, plus NODES_PER_BLOCK nodes."""
        acc = Tb.alloc_buffer((tile_size, count_), "float32", scope="local")
        first_node = node_block * NODES_PER_BLOCK

        def lanes_of(body):
            lane_loops(count_, vector, lambda lane: body(lane, {inner[0]: column_of(lane)} if inner else {}),
                       emitter.lanes)

        def element(t, mi):
            full = {**mapping, **mi, **at_tile(tile, t)}
            return [full[v] for v, _ in axes]
        with Tb.unroll(0, tile_size) as t:             # (the first block starts the sums: no zeroing)
            lanes_of(lambda lane, mi: Tb.buffer_store(acc, started(node_block, out[element(t, mi)]), [t, lane]))
        with Tb.serial(0, NODES_PER_BLOCK) as k:
            n = first_node + k
            with Tb.If(n < count):
                with Tb.Then():
                    def accumulate(m):
                        with Tb.unroll(0, tile_size) as t:
                            lanes_of(lambda lane, mi: Tb.buffer_store(
                                acc, acc[t, lane] + rewrite(coeff, {**mapping, **m, **mi, **at_tile(tile, t)}, n),
                                [t, lane]))
                    axes_grid(summed, accumulate)
        with Tb.serial(0, tile_size) as t:
            with Tb.If(tile * TILE + t < extent):          # a short last tile repeats its last row
                with Tb.Then():
                    lanes_of(lambda lane, mi: Tb.buffer_store(out, acc[t, lane], element(t, mi)))

    with Tb.parallel(0, (extent + TILE - 1) // TILE) as tile:
        # blocks of nodes: the block's rows stay in the cache while every tile of `out` takes them
        with Tb.serial(0, node_blocks(count, NODES_PER_BLOCK)) as node_block:
            def body(mapping):
                def chunk(column_of, width_, vector):
                    columns(mapping, tile, node_block, column_of, width_, vector)
                if inner is None:
                    chunk(None, 1, False)
                else:
                    column_chunks(inner[1], width, chunk)
            axes_grid(others, body)


def _factors(coeff, tiled, inner):
    """(P, Q) with coeff = P * Q, P free of the vector axis `inner` and Q of the `tiled` one (each
    factor of the product goes where it can; a factor with both axes, or none with the vector
    axis, gives None)."""
    if tiled is None or inner is None:
        return None
    factors = []

    def flatten(e):
        if isinstance(e, tirx.Mul):
            flatten(e.a)
            flatten(e.b)
        else:
            factors.append(e)
    flatten(coeff)
    rows, columns = [], []
    for factor in factors:
        by_column, by_row = uses(factor, inner[0]), uses(factor, tiled[0])
        if by_column and by_row:
            return None
        (columns if by_column else rows).append(factor)
    if not columns:
        return None
    return _product(rows), _product(columns)


def _product(factors):
    return functools.reduce(lambda a, b: a * b, factors) if factors else tirx.const(1.0, "float32")
