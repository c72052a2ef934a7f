"""The level pass's bfloat16 contractions (`adjoint_bf16`) on Intel AMX tiles, where the CPU has
AMX-BF16: a register tile's sums (NODE_TILE rows x up to C_TILES vectors of 16 columns) as
`tdpbf16ps` on tiles, in place of one `vdpbf16ps` per node, vector and pair.  The weight sums'
packed products take the same tiles (`adjoint_packed._AmxPairs`).

On Sapphire Rapids `vdpbf16ps` issues at the rate of a float32 FMA, so pairs alone made the
training step no faster than float32 (docs/training.md, "Speed"); one `tdpbf16ps` of 8 rows
does the work of 128 of them.  The operands already lie as the tiles read them:

* A (the tile's nodes x 16 pairs): the rows of the nest's scratch of rounded operand pairs
  (`adjoint_bf16.round_operands`), [node of the run, other summed axes..., pair]: a whole
  tile's nodes are consecutive rows;
* B (16 pairs x 16 columns): 16 consecutive rows of a panel of the weight's pair copy
  (`adjoint_copies.Transposed` / `Widened`), one line each;
* C (the tile's nodes x 16 float32 columns): one accumulator tile per vector of the chunk,
  stored at the end into the register tile's array, which the nest then writes as before.

The pair axis runs in steps of 16 pairs, then one step of the rest (A_REST, B_REST, configured
for that many pairs), so no tile reads past the operands.  TreeLSTM's forward at h = 150, for
each child j and whole tile of 8 nodes, a chunk of 64 columns (4 vectors; `vdpbf16ps` took 32)::

    before: for kp in range(75): for node in range(8): for v in range(2):
                acc[node, v] = vdpbf16ps(acc[node, v], x_pairs[node, j, kp], U_T[panel_v, j*75 + kp, :])
    after:  for v: tilezero(C_v)
            for step in range(4):                               (pairs 0..63)
                A = tileload(&x_pairs[tile, j, 16 step], row stride)
                for v: B = tileload(&U_T[panel_v, j*75 + 16 step, 0], 64); tdpbf16ps(C_v, A, B)
            A_REST, B_REST = pairs 64..74 (11 of them); for v: tdpbf16ps(C_v, A_REST, B_REST)
            for v: tilestore(&acc[0, 16 v], C_v)

Each nest loads its configuration in each thread, at each level (`load_config`), before its tiles.  Every tile
is NODE_TILE rows, and a tile costs the same whatever its nodes: a run's rest past its whole tiles (1 to 7
nodes) is one tile (`Run.tiles(one_rest=True)`, not one of 1, 2 and 4 nodes each, as register tiles of FMAs
take it), which reads the scratch's next rows too (the scratch has NODE_TILE rows of padding), its sums there
unwritten.  With chunks of C_TILES vectors, the rest's tiles on AMX made a step at batch 25 8% faster than on
`vdpbf16ps` (docs/bench-2026-12-07/amx-train/ab.txt item 2a; the two changes not measured apart); the rest as one
tile, 4.5% / 3.4% / 1.0% faster at batch 25 / 10 / 1 (docs/bench-2026-12-08/ab.txt).
"""
from __future__ import annotations

import math

import tvm
from tvm import tirx
from tvm.script.ir_builder import tirx as Tb

from . import amx_bf16
from .adjoint_bf16 import weight_word
from .dot_bf16 import LANES
from .tir_builder import values_of

#: tile registers: accumulators 0-3, the operand pairs (A) and the weight pairs (B) of a step of
#: PAIRS, and those of the pair axis's last, shorter step
C_TILES, A, B, A_REST, B_REST = 4, 4, 5, 6, 7
#: pairs a step of the sum takes (a tile row's 64 bytes)
PAIRS = 16


def takes(emitter, the_plan) -> bool:
    """Whether the tiles of the nest `the_plan` (`adjoint_bf16.Plan`, or None: float32) run on AMX
    tiles: an AMX emitter's nests on pairs (their chunks then C_TILES vectors at most,
    `adjoint_nest.emit_nest`'s `tile_width`)."""
    return the_plan is not None and emitter.amx


def load_config(rows: int, rest: int = 0):
    """Load the tile configuration for tiles of `rows` nodes (C, A) and steps of PAIRS pairs, with
    A_REST and B_REST for a last step of `rest` pairs where rest > 0."""
    shapes = {c: (rows, amx_bf16.ROW_BYTES) for c in range(C_TILES)}
    shapes.update({A: (rows, amx_bf16.ROW_BYTES), B: (PAIRS, amx_bf16.ROW_BYTES)})
    if rest:
        shapes.update({A_REST: (rows, 4 * rest), B_REST: (rest, amx_bf16.ROW_BYTES)})
    config = Tb.alloc_buffer((amx_bf16.CONFIG_BYTES,), "uint8", scope="local")
    for i, value in enumerate(amx_bf16.config_bytes(shapes)):
        Tb.buffer_store(config, value, [i])
    call("llvm.x86.ldtilecfg", tirx.address_of(config[0]))


def call(name, *args):
    """Emit a call of the LLVM intrinsic `name` (AMX's take tile registers as `amx_bf16.tile`)."""
    Tb.evaluate(tirx.call_llvm_intrin("void", name, *args))


def tile_dot(c_tiles, a_tile, a_address, a_stride, b_tile, b_addresses, b_stride):
    """C_v += A . B_v for each accumulator tile v of `c_tiles`: A loaded once from `a_address`, each
    B_v from its address in `b_addresses` (strides in bytes)."""
    call("llvm.x86.tileloadd64", amx_bf16.tile(a_tile), a_address, tirx.const(a_stride, "int64"))
    for c, address in zip(c_tiles, b_addresses):
        call("llvm.x86.tileloadd64", amx_bf16.tile(b_tile), address, tirx.const(b_stride, "int64"))
        call(amx_bf16.DOT, amx_bf16.tile(c), amx_bf16.tile(a_tile), amx_bf16.tile(b_tile))


def tiles_io(name, vectors, acc, width):
    """Each accumulator tile v of `vectors` loaded from (`tileloadd64`) or stored to (`tilestored64`)
    the columns 16 v .. 16 v + 15 of `acc` (rows x `width` float32)."""
    for v in range(vectors):
        call(name, amx_bf16.tile(v), tirx.address_of(acc[0, v * LANES]), tirx.const(4 * width, "int64"))
    # (TVM's buffer compaction sees the tiles' address, not their rows: where the nest then reads
    # only a chunk's first columns it shrank `acc`'s rows to those, and the tiles' stride overran
    # them; a read of the last element keeps the array whole)
    Tb.evaluate(acc[int(acc.shape[0]) - 1, width - 1])


def accumulate(the_plan, scratch, run, level, acc, width, column_of, mapping_of, rewriter, nest):
    """`adjoint_bf16.accumulate`'s sums for a tile of the run (`level`), on AMX tiles (the same
    arguments; `acc` NODE_TILE rows, whatever the tile's nodes): `acc` gets the sums, no init needed."""
    vectors, analyzer = width // LANES, tvm.sym.Analyzer()
    if vectors > C_TILES:
        raise ValueError(f"adjoint_amx: a chunk of {vectors} vectors; the tiles hold {C_TILES}")
    pairs = the_plan.extent // 2
    position, row = level.node(0)
    for v in range(vectors):
        call("llvm.x86.tilezero", amx_bf16.tile(v))

    def over_others(others):
        def step(pair, a_tile, b_tile):
            def weight_at(v):
                column = column_of(v * LANES)
                column = tirx.const(column, "int32") if isinstance(column, int) else column
                at = weight_word(the_plan, {**mapping_of(others, column), the_plan.axis: pair * 2}, position, row,
                                 rewriter, analyzer)
                return tirx.address_of(tirx.BufferLoad(the_plan.copy, at))
            operand = scratch[[level.first - run.first] + values_of(others, the_plan.others) + [pair]]
            tile_dot(range(vectors), a_tile, tirx.address_of(operand), 4 * math.prod(int(d) for d in scratch.shape[1:]),
                     b_tile, [weight_at(v) for v in range(vectors)], 4 * int(the_plan.copy.shape[-1]))
        if pairs >= PAIRS:
            with Tb.serial(0, pairs // PAIRS) as chunk:
                step(chunk * PAIRS, A, B)
        if pairs % PAIRS:
            step(tirx.const(pairs - pairs % PAIRS, "int32"), A_REST, B_REST)
    nest(the_plan.others, over_others)
    tiles_io("llvm.x86.tilestored64", vectors, acc, width)
