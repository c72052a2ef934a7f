"""The weight gradients' packed matrix product (`emit_packed`), in float32 or on bfloat16 pairs.

A node-independent weight read's gradient whose summand is (a row factor free of the vector
axis) x (a column factor free of the tiled axis) is a matrix product over the stage's nodes:
TreeLSTM's dU, ``R[g, i, j, k] = sum_n d_gates_sum[n, g, i] * h[children[n, j], k]``
(`adjoint_weights.emit_weight_read` finds the factors).  For each block of nodes, each core copies
the column factor of every column into a panel (each chunk's nodes one after another), then, for
each tile of TILE rows, the row factor into another (a node's TILE values side by side), and each
register tile sums from the two panels alone: both stream through the cache in order, where a
nest reading each node's rows where they lie takes a new row of both factors per node (TreeLSTM's
dU at 120 against 190 GFLOP/s a core in a probe on Sapphire Rapids)::

    for share (parallel), node_block:                 (n: the block's nodes up to the stage's last)
        column_panel[j, k_chunk, n, lane] = h[children[n, j], k]
        for (i_tile, g) in the share's tiles:
            row_panel[n, t] = d_gates_sum[n, g, 8*i_tile + t]
            for j, k_chunk:
                acc[t, lane] = R[g, 8*i_tile + t, j, k] if node_block else 0
                for n in node_block:  acc[t, lane] += row_panel[n, t] * column_panel[j, k_chunk, n, lane]
                R[g, 8*i_tile + t, j, k] = acc[t, lane]

With pairs (`compile(training=True, precision="bf16")`, `adjoint_bf16`) the panels hold bfloat16
pairs along the nodes (a column panel's word: one column's values at nodes 2p and 2p + 1; a row
panel's: one row's), and each step adds, per pair of nodes, a row's pair broadcast . a vector of
column pairs (`vdpbf16ps`); a chunk's columns past its last whole vector are summed in a whole
vector too (the lanes past the chunk read words no pack wrote and are never stored).

Either way the last block packs and sums only the steps that hold a node (nodes past the stage's
last within a step are zeros in the panels), the first block of nodes starts
the sums (the caller does not zero `R`), and the nest is parallel over the row tiles (x the axes
the column factor does not use), one share of them per core.
"""
from __future__ import annotations

import math

import tvm
from tvm import tirx
from tvm.script.ir_builder import tirx as Tb

from . import adjoint_amx
from .adjoint_bf16 import padded_width
from .dot_bf16 import IMPORT_ATTR, LANES, LLVM_IR, PAIR_STORAGE, dot_pairs, pair_bits
from .tir_builder import column_chunks, lane_loops, unravel, uses, values_of

#: values of the tiled axis per register tile (and per job of the parallel loop)
TILE = 8
#: nodes per block of the float32 nest: its panels stay in L1 while every tile takes them
PACK_NODES = 32
#: nodes per block of the nest on pairs: twice float32's, so that each pass over the gradient's
#: tiles (read and written once per block) serves twice the nodes, with its panels the same bytes.
#: Zen 4, TreeLSTM h = 150, x = 300, batch 25, paired A/Bs against float32: the backward call
#: 0.78-0.84x of float32's with 64, 0.85-0.86x with 32 (docs/bench-2026-12-07/bf16-train/pack_nodes.txt, ab.txt)
PAIR_PACK_NODES = 64
#: nodes per block of the nest on AMX tiles (a block's steps trimmed to whole tile steps).  Sapphire Rapids,
#: TreeLSTM h = 150, x = 300, the bf16 step against blocks of 64 (one process, rounds alternating): 128 -3.6% /
#: -1.2% at batch 25 / 10, 256 -4.3% / -4.1%, 512 -3.4% / +1.9% (untrimmed); 256 trimmed -5.8% / -4.8% / -2.2%
#: at batch 25 / 10 / 1 (docs/bench-2026-12-07/amx-train/ab.txt)
AMX_PACK_NODES = 256


def emit_packed(rewrite, rows, columns, tiled, inner, others, axes, out, count, lanes, width, shares,
                pairs: bool = False, amx: bool = False):
    """out = sum over the nodes [0, count) of rows(n, tiled axis, ...) * columns(n, vector axis, ...)
    (module docstring); rewrite(e, mapping, n): `e` for node n at the block axes' `mapping`;
    `axes`: out's, in its order; `tiled`/`inner`: the row and the vector axis, (var, extent);
    `others`: out's remaining axes; `width`: columns of a register tile; `shares`: cores.
    pairs: bfloat16 products on `vdpbf16ps` (`lanes` must be its 16); amx: on AMX tiles (`_AmxPairs`)."""
    if pairs and lanes != LANES:            # (the callers ask `adjoint_bf16.takes_pairs` first)
        raise ValueError(f"emit_packed: pairs take vectors of {LANES} float32 lanes (vdpbf16ps'), not {lanes}")
    form = (_AmxPairs if amx else _Pairs)(width) if pairs else _Float32(lanes)
    extent, columns_extent = int(tiled[1]), int(inner[1])
    by_column = [a for a in others if uses(columns, a[0])]
    by_row = [a for a in others if not uses(columns, a[0])]
    column_combos = math.prod(int(e) for _, e in by_column)
    row_tiles, row_combos = (extent + TILE - 1) // TILE, math.prod(int(e) for _, e in by_row)
    jobs, panel = row_tiles * row_combos, form.panel(columns_extent)

    def value(e, mapping, n):
        """`e` at node n, 0 past the stage's last node."""
        return tirx.if_then_else(n < count, rewrite(e, mapping, tirx.min(n, count - 1)), tirx.const(0.0, "float32"))

    with Tb.parallel(0, shares) as share:
        first, last = Tb.bind(share * jobs // shares), Tb.bind((share + 1) * jobs // shares)
        column_panel = Tb.alloc_buffer((column_combos * panel,), form.dtype)
        row_panel = Tb.alloc_buffer((form.steps * TILE,), form.dtype, scope="local")
        form.prologue()
        with Tb.serial(0, node_blocks(count, form.nodes)) as node_block:
            # the block's steps that hold a node (the last block's fewer): no pack or sum of zeros past them
            rest = count - node_block * form.nodes
            held = rest if form.per_step == 1 else (rest + form.per_step - 1) // form.per_step
            whole = form.step_multiple
            steps = Tb.bind(tirx.min(form.steps, held if whole == 1 else (held + whole - 1) // whole * whole))
            with Tb.serial(0, column_combos) as combo:
                with Tb.serial(0, steps) as step:
                    n = node_block * form.nodes + step * form.per_step

                    def pack(column_of, width_, vector):
                        def at_lane(lane):
                            mapping = {**grid_at(combo, by_column), inner[0]: column_of(lane)}
                            Tb.buffer_store(column_panel, form.word(lambda m: value(columns, mapping, m), n),
                                            [combo * panel + form.panel_at(column_of, width_, step, lane)])
                        lane_loops(width_, vector, at_lane, lanes)
                    column_chunks(columns_extent, width, pack)
            with Tb.serial(first, last) as job:
                tile, row_combo = job // row_combos, job % row_combos
                row_map = grid_at(row_combo, by_row)
                with Tb.serial(0, steps) as step:
                    n = node_block * form.nodes + step * form.per_step
                    form.fill_rows(lambda t, row: Tb.buffer_store(
                        row_panel, form.word(lambda m: value(rows, {**row_map, tiled[0]: row}, m), n),
                        [form.row_at(step, t)]), tile, extent)
                with Tb.serial(0, column_combos) as combo:
                    def sums(column_of, width_, vector):
                        acc = Tb.alloc_buffer((TILE, form.summed_width(width_)), "float32", scope="local")

                        def element(t, lane):
                            full = {**row_map, **grid_at(combo, by_column), inner[0]: column_of(lane),
                                    tiled[0]: tirx.min(tile * TILE + t, extent - 1)}
                            return values_of(full, axes)
                        with Tb.unroll(0, TILE) as t:
                            lane_loops(width_, vector, lambda lane: Tb.buffer_store(
                                acc, started(node_block, out[element(t, lane)]), [t, lane]), lanes)
                        form.accumulate(acc, row_panel, column_panel, combo * panel, column_of, width_, vector, steps)
                        with Tb.serial(0, TILE) as t:
                            with Tb.If(tile * TILE + t < extent):
                                with Tb.Then():
                                    lane_loops(width_, vector, lambda lane: Tb.buffer_store(
                                        out, acc[t, lane], element(t, lane)), lanes)
                    column_chunks(columns_extent, width, sums)


class _Float32:
    """The panels hold float32 values, a node a step; each step adds row x column per lane."""
    dtype, per_step = "float32", 1
    #: a block's steps are summed in whole multiples of this (the nodes past the last pack zeros)
    step_multiple = 1

    def __init__(self, lanes):
        self.lanes = lanes
        self.nodes = self.steps = PACK_NODES          # (read when made: a probe may set it)

    def panel(self, columns_extent):
        return self.nodes * columns_extent

    def panel_at(self, column_of, width_, k, lane):
        """A chunk's nodes one after another, its `width_` columns side by side."""
        return column_of(0) * self.nodes + k * width_ + lane

    def word(self, value_at, n):
        return value_at(n)

    def prologue(self):
        """What each core emits before its blocks (nothing: `_AmxPairs` loads its tile configuration)."""

    @staticmethod
    def row_at(step, t):
        """The row panel's word of the tile's row t at `step`: a step's TILE rows side by side."""
        return step * TILE + t

    def fill_rows(self, fill, tile, extent):
        """fill(t, row) for each of the tile's TILE rows: a whole tile's in one vector; the last,
        short tile's with its last row repeated."""
        with Tb.If(tile < extent // TILE):
            with Tb.Then():
                with Tb.vectorized(0, TILE) as t:
                    fill(t, tile * TILE + t)
            with Tb.Else():
                with Tb.unroll(0, TILE) as t:
                    fill(t, tirx.min(tile * TILE + t, extent - 1))

    def summed_width(self, width_):
        return width_

    def accumulate(self, acc, row_panel, column_panel, base, column_of, width_, vector, steps):
        with Tb.serial(0, steps) as k:
            with Tb.unroll(0, TILE) as t:
                lane_loops(width_, vector, lambda lane: Tb.buffer_store(
                    acc, acc[t, lane] + row_panel[k * TILE + t] * column_panel[
                        base + self.panel_at(column_of, width_, k, lane)], [t, lane]), self.lanes)


class _Pairs:
    """The panels hold uint32 words of bfloat16 pairs along the nodes, a pair of nodes a step;
    each step adds a row's pair . a vector of column pairs (`dot_pairs`).  Every chunk's panel is
    `width` columns wide (the last chunk's too, summed in whole vectors)."""
    dtype, per_step = PAIR_STORAGE, 2

    def __init__(self, width):
        self.width = width
        self.nodes = PAIR_PACK_NODES
        self.steps = PAIR_PACK_NODES // 2

    def panel(self, columns_extent):
        return -(-columns_extent // self.width) * self.steps * self.width

    def panel_at(self, column_of, width_, pair, lane):
        return (column_of(0) // self.width * self.steps + pair) * self.width + lane

    def word(self, value_at, n):
        return pair_bits(value_at(n), value_at(n + 1))

    #: (a node's rows of a whole tile as one vector load: with the last tile's `min` on every lane, LLVM built
    #: each tile of the row panel element by element, 8% of the bf16 backward's samples, Zen 4)
    fill_rows = _Float32.fill_rows
    row_at = staticmethod(_Float32.row_at)
    prologue, step_multiple = _Float32.prologue, _Float32.step_multiple

    def summed_width(self, width_):
        return padded_width(width_)

    def accumulate(self, acc, row_panel, column_panel, base, column_of, width_, vector, steps):
        with Tb.attr(tirx.const(0, "int32"), IMPORT_ATTR, tvm.ir.StringImm(LLVM_IR)):
            with Tb.serial(0, steps) as pair:
                with Tb.unroll(0, TILE) as t:
                    for vector_ in range(padded_width(width_) // LANES):
                        start = base + self.panel_at(column_of, width_, pair, vector_ * LANES)
                        lanes = [t, tirx.Ramp(vector_ * LANES, 1, LANES)]
                        Tb.buffer_store(acc, dot_pairs(acc[lanes], row_panel[pair * TILE + t],
                                                       column_panel[tirx.Ramp(start, 1, LANES)]), lanes)


class _AmxPairs(_Pairs):
    """`_Pairs` on AMX tiles (`adjoint_amx`): C the tile's TILE rows x 16 columns, A the rows'
    pairs of 16 steps, B 16 steps of a column panel's 16 columns, AMX_PACK_NODES nodes a block.
    An A tile's row is one row's pairs, so the row panel holds each row's steps one after another
    (a whole tile's: a node pair's 8 rows are read and rounded as one vector and stored a block's steps apart: row
    by row in scalars, that fill held 18% of the bf16 backward's samples, Sapphire Rapids); a
    block's steps are packed and summed in whole steps of the tiles (the last block's steps past
    its last node hold zeros)."""
    step_multiple = adjoint_amx.PAIRS

    def __init__(self, width):
        super().__init__(width)
        self.nodes = AMX_PACK_NODES
        self.steps = AMX_PACK_NODES // 2

    def prologue(self):
        adjoint_amx.load_config(TILE)

    def row_at(self, step, t):
        return t * self.steps + step

    def accumulate(self, acc, row_panel, column_panel, base, column_of, width_, vector, steps):
        summed = padded_width(width_)
        vectors = summed // LANES
        adjoint_amx.tiles_io("llvm.x86.tileloadd64", vectors, acc, summed)
        with Tb.serial(0, steps // adjoint_amx.PAIRS) as chunk:
            first = chunk * adjoint_amx.PAIRS
            b_at = [tirx.address_of(column_panel[base + self.panel_at(column_of, width_, first, v * LANES)])
                    for v in range(vectors)]
            adjoint_amx.tile_dot(range(vectors), adjoint_amx.A, tirx.address_of(row_panel[first]), 4 * self.steps,
                                 adjoint_amx.B, b_at, 4 * self.width)
        adjoint_amx.tiles_io("llvm.x86.tilestored64", vectors, acc, summed)


def grid_at(combo, grid) -> dict:
    """The axes of `grid` ((var, extent) pairs) at its flat index `combo`, row-major."""
    return dict(zip((v for v, _ in grid), unravel(combo, [int(e) for _, e in grid])))


def started(node_block, partial):
    """A sum's value before the block `node_block`: zero before the first."""
    return tirx.Select(node_block == 0, tirx.const(0.0, "float32"), partial)


def node_blocks(count, size):
    """Blocks of `size` nodes over `count` nodes, at least one (so an empty stage still writes
    its zeros)."""
    return tirx.max((count + size - 1) // size, 1)
