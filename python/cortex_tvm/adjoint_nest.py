"""One loop nest of the compiled backward over a run of a level's nodes (`adjoint_runs.Run`).

`emit_nest` writes one value per element that a nest's indices address: the block's value
(the recomputation), or the adjoint of one read (`adjoint_emit.StageEmitter`).  Axes of the
block that the indices do not use are summed first, in a register tile of `tile_sums` sums
(the tile's nodes x tile_sums / nodes vectors of the indices' last axis), so each weight
vector read serves the whole tile, and the run's whole tiles take their turns inside each chunk
of columns, so the weights that chunk reads stay in the cache from tile to tile.  TreeLSTM's
``gates_sum[n, g, i] = sum_{j,k} U[g*H + i, j*H + k] * h[children[n, j], k]`` gives, per run::

    for j, k_outer:                          # the read h[children[n, j], k] uses (j, k)
        for tile in the run's whole tiles:
            acc[t, lane] = 0
            for g, i:  acc[t, lane] += d_gates_sum[row_t, g, i] * U[g*H + i, j*H + 8*k_outer + lane]
            d_h[children[offset + n_t, j], 8*k_outer + lane] += acc[t, lane]     (a real child only)
    (then the rest's tiles, each under its own condition)
"""
from __future__ import annotations

import contextlib
import math

import tvm
import tvm_ffi
from tvm import tirx
from tvm.script.ir_builder import tirx as Tb

from . import adjoint_amx, adjoint_bf16
from .adjoint_runs import NODE_TILE
from .linearize import NULL_SLOT
from .target import bytes_of
from .tir_builder import axes_grid, chunk_count, column_chunks, lane_loops, nth_chunk, unravel, uses, vector_loop

#: stands for the row of the node in a stage's value and adjoint arrays in expressions built
#: before the node's loop exists
ROW = tirx.Var("row", "int32")
#: likewise the node's position in its level (the row of a transient block's value array)
POSITION = tirx.Var("position", "int32")
#: the sums a register tile keeps in flight on a CPU with one FMA unit, and a rest tile on any:
#: its nodes x SUMS_IN_FLIGHT / nodes vectors (16, as 8 nodes x 2 vectors or 16 nodes x 1, ran
#: 1.5-2.3x slower on Zen 4 for TreeLSTM H=150; `tile_sums`)
SUMS_IN_FLIGHT = 8
#: the weight bytes (read alike by every node) from which a contraction of the training forward
#: runs on shares of its columns (`splits_columns`).  Zen 4, interleaved A/Bs of the step, each
#: contraction's bytes: faster split with TreeLSTM (h = 100: 400 KB, 2.4%; h = 150: 900 KB,
#: 2-5%, 1.7% as AVX2 code; h = 300: 3.6 MB, 4%) and TreeGRU (540 KB, 1%); slower with SeqLSTM
#: (two of 360 KB a level, 2.3-2.5%), ChildSum (270 KB, 1-2%) and TreeFC (90 KB, 4%): the extra
#: fork and join a level costs more than reading a part of a weight that size saves
SPLIT_WEIGHT_BYTES = 384 * 1024


def emit_nest(emitter, block, indices, coeff, bufs, run, write, skip_null=None):
    """One loop nest over a run of nodes (`Run`) for `emitter`'s (`StageEmitter`) `block`, tile
    by tile: `coeff` summed over the block's axes that `indices` do not use, then
    `write(rewrite, value)` at each element they index.  The summed axes run outside a tile's
    nodes, so each weight vector they read serves every node of the tile (`accumulated`), and
    the run's whole tiles take their turns inside each chunk of columns, so the weights' slice
    that a chunk reads stays in the cache from one tile to the next; a nest with no summed axis
    is elementwise (`direct`).  A run with `columns` (`adjoint_runs.column_shares`) takes its
    share of the chunks of every outer index, over all its nodes (`accumulated_share`)."""
    used = block.used_axes(indices)
    summed = block.summed_axes(used)
    inner = next(((v, ext) for v, ext in used if v.same_as(indices[-1])), None)
    outer = [(v, ext) for v, ext in used if inner is None or not v.same_as(inner[0])]
    inner_axes = [inner] if inner else []

    def nest(axes, body):
        if axes and axes is inner_axes:
            vector_loop(inner[1], emitter.lanes, lambda k: body({inner[0]: k}))
        else:
            axes_grid(axes, body)

    def rewriter(mapping, position, row):
        mapping = {**mapping, block.position: position, ROW: row, POSITION: position}
        return lambda e: emitter.rewrite(e, bufs, mapping, run.offset, run.size,
                                       inner[0] if inner else None)

    pairs = adjoint_bf16.plan(emitter, coeff, bufs, inner, summed, outer)
    on_amx = adjoint_amx.takes(emitter, pairs)
    scratch = None
    if pairs is not None:    # (the stage's rows bound a run's nodes, and are known where the function starts)
        # (an AMX tile reads NODE_TILE rows whatever its nodes: the rows past a rest tile's are padding)
        rows = bufs["adj"][block.key].shape[0] + (NODE_TILE if emitter.amx else 0)
        scratch = adjoint_bf16.round_operands(pairs, run, rows, rewriter)
        if emitter.amx:
            adjoint_amx.load_config(NODE_TILE, pairs.extent // 2 % adjoint_amx.PAIRS)

    @contextlib.contextmanager
    def real_child(outer_map, position, row):
        if skip_null is None or (inner and uses(skip_null, inner[0])):
            yield
            return
        with Tb.If(rewriter(outer_map, position, row)(skip_null) != NULL_SLOT):
            with Tb.Then():
                yield

    def direct(outer_map):
        def on_tile(level):
            with level.nodes(positions=True) as (position, row):
                with real_child(outer_map, position, row):
                    def at(m):
                        rewrite = rewriter({**outer_map, **m}, position, row)
                        write(rewrite, rewrite(coeff))
                    nest(inner_axes, at)
        run.each(on_tile)

    def tile_width(tile_size):
        """Columns of a tile of `tile_size` nodes: `tile_sums` / tile_size vectors, but no more
        than the whole vectors of the indices' last axis; on AMX tiles (`adjoint_amx`), whatever
        its nodes, C_TILES vectors (an operand tile serves each)."""
        whole = int(inner[1]) // emitter.lanes if inner else 1
        if on_amx:
            return emitter.lanes * max(1, min(adjoint_amx.C_TILES, whole))
        return emitter.lanes * max(1, min(tile_sums(tile_size, emitter.vectors) // tile_size, whole))

    def accumulate_tile(outer_map, level, column_of, width, vector):
        """A register tile of `tile_sums` accumulators: the tile's nodes x tile_sums / nodes
        vectors of the indices' last axis (a tile of one node still has SUMS_IN_FLIGHT
        independent sums in flight, not one chain of dependent FMAs); a chunk's last columns
        past its whole vectors are one short vector of the same tile (`lane_loops`)."""
        summing = width if pairs is None else adjoint_bf16.padded_width(width)
        acc = Tb.alloc_buffer((NODE_TILE if on_amx else level.tile_size, summing), "float32", scope="local")

        def lanes_of(body, width=width, vector=vector):
            lane_loops(width, vector, lambda lane: body(lane, {inner[0]: column_of(lane)} if inner else {}),
                       emitter.lanes)
        if not on_amx:
            with Tb.unroll(0, level.tile_size) as t:
                lanes_of(lambda lane, _: Tb.buffer_store(acc, tirx.const(0.0, "float32"), [t, lane]),
                        summing, vector or pairs is not None)

        def accumulate(m):
            with Tb.unroll(0, level.tile_size) as t:
                position, row = level.node(t)
                lanes_of(lambda lane, mi: Tb.buffer_store(
                    acc, acc[t, lane] + rewriter({**outer_map, **m, **mi}, position, row)(coeff), [t, lane]))
        if pairs is None:
            nest(summed, accumulate)
        else:
            (adjoint_amx if on_amx else adjoint_bf16).accumulate(pairs, scratch, run, level, acc, summing, column_of,
                                    lambda m, column: {**outer_map, **m, inner[0]: column}, rewriter, axes_grid)
        with level.nodes(positions=True, tile_index=True) as (position, row, t):
            with real_child(outer_map, position, row):
                lanes_of(lambda lane, mi: write(rewriter({**outer_map, **mi}, position, row), acc[t, lane]))

    def accumulated(outer_map):
        """`accumulate_tile` for every tile of the run and chunk of columns."""
        def columns(level, column_of, width, vector):
            accumulate_tile(outer_map, level, column_of, width, vector)

        for tile_size, tiles, is_loop in run.tiles(one_rest=on_amx):
            def over_columns(chunk, width=tile_width(tile_size)):
                if inner is None:
                    chunk(None, 1, False)
                else:
                    column_chunks(inner[1], width, chunk)
            if is_loop:                     # the whole tiles' loop inside each chunk of columns
                def in_each_tile(column_of, width, vector, tiles=tiles):
                    with tiles() as level:
                        columns(level, column_of, width, vector)
                over_columns(in_each_tile)
            else:                           # a rest tile's condition outside its chunks
                with tiles() as level:
                    over_columns(lambda column_of, width, vector, level=level:
                                 columns(level, column_of, width, vector))

    def accumulated_share(share, shares):
        """`accumulated` over this core's part of the nest's chunks of columns: the chunks of
        every outer index, numbered outer index by outer index, split into `shares` runs."""
        for tile_size, tiles, _ in run.tiles(one_rest=on_amx):
            width = tile_width(tile_size)
            per_outer = chunk_count(inner[1], width)
            total = per_outer * math.prod(int(ext) for _, ext in outer)
            first, last = Tb.bind(share * total // shares), Tb.bind((share + 1) * total // shares)
            with Tb.serial(first, last) as chunk_number:
                outer_map = dict(zip((v for v, _ in outer), unravel(chunk_number // per_outer,
                                                                   [int(ext) for _, ext in outer])))

                def emit(column_of, width, vector, tiles=tiles, outer_map=outer_map):
                    with tiles() as level:  # (the whole tiles' loop inside the chunk, as above)
                        accumulate_tile(outer_map, level, column_of, width, vector)
                nth_chunk(inner[1], width, chunk_number % per_outer, emit)

    if summed and run.columns is not None:
        accumulated_share(*run.columns)
    else:
        nest(outer, accumulated if summed else direct)


def tile_vectors(info) -> int:
    """Vectors per node of a whole tile (`target.CpuInfo`): one per FMA unit, where the registers
    hold the tile's 8 nodes x 2 accumulators and its operands (AVX-512's 32; AVX2's 16 do not)."""
    return info.fma_units if info.registers >= 32 else 1


def tile_sums(tile_size: int, vectors: int) -> int:
    """Sums a register tile of `tile_size` nodes keeps in flight: a whole tile's NODE_TILE nodes x
    `vectors` (`tile_vectors`), a rest tile's SUMS_IN_FLIGHT.  Sapphire Rapids, TreeLSTM h = 150,
    x = 300, interleaved A/Bs of the training step: whole tiles of 8 x 2 against 8 x 1, 11% faster
    at batch 25 and 7% at 10; rest tiles of 1 and 2 nodes with 4 sums against 8, mixed (the
    backward 10% faster at batch 1, 9% slower at batch 10, within 3% at 25); 8 nodes x 3 vectors
    as <48 x float> loops made the step 9x slower (docs/bench-2026-12-06/intel-train/ab.txt)."""
    return NODE_TILE * vectors if tile_size == NODE_TILE else SUMS_IN_FLIGHT


def splits_columns(emitter, block, indices, coeff) -> bool:
    """Whether the nest for `indices` and `coeff` (`emit_nest`) runs on a share of its columns
    per core (`adjoint_runs.column_shares`): a contraction (axes summed) over a vector axis
    whose summand reads at least SPLIT_WEIGHT_BYTES of weights alike at every node, which each
    core then reads a part of instead of all (a row read through the node's word, an
    embedding's, counts for nothing: each node reads one row of the table)."""
    used = block.used_axes(indices)
    if not block.summed_axes(used) or not any(v.same_as(indices[-1]) for v, _ in used):
        return False
    found = {}

    def visit(load):
        weight = emitter.weight_of(load.source)
        if weight is not None and not emitter.reads_node(load):
            found[weight.name] = math.prod(weight.shape) * bytes_of(weight.dtype)
    tvm_ffi.structural_walk(coeff, (tvm.ir.TensorLoad, visit), order="post")
    return sum(found.values()) >= SPLIT_WEIGHT_BYTES
