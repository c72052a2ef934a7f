"""The copies of its weights that the level pass reads in place of them (`adjoint_kernel.level_pass`):
their layouts, which reads take them, and the loop nests that write them at the start of a pass.

A register tile loads a vector of a weight's row at every step of its sum.  Three things make
that load slow where it reads the weight as it lies: a vector along the weight's first axis
(TreeLSTM's U[g*H + i, k] computing gates_sum[n, g, i]) is not contiguous; a row whose length
is not a whole number of 64-byte cache lines (750 floats at h = 150) starts most vectors inside a
line, so that each load touches two; and the steps of the sum, one row each, lie a row apart
(3.2 KB), which the hardware's prefetchers follow worse than one stream.  `Transposed` is the
copy for the first (the weight's transpose), `Widened` for a read along the last axis; both lay
each block of columns (a gate's H) out in whole lines, in panels of a line's width, every row of
a panel after the last, so that a tile's loads run through memory in order.  `copied_reads`
finds the weights to copy from a stage's blocks; `emit_transpose` and `emit_widen` write the
copies, in parallel, before the levels.  The "forward" and "all" parts write them; "backward"
reads the copies its forward wrote (the same parameters, this thread's arrays: `LevelPass`).  A
GPU build takes plain transposes its host makes.

Measured (Sapphire Rapids VM, 2 threads, TreeLSTM, training steps in one process): 5-6% faster
steps at h = 150, batch 1-25, with blocks on lines, 7% at h = 300; panels a further 3-5% at h =
150, 16.5% at h = 300; the backward's copy also where a block is a whole number of lines (it read
the weight as it lies before): 2-4% at h = 128, 23% at h = 256 (docs/training.md, "Speed").
"""
from __future__ import annotations

import contextlib

import tvm
import tvm_ffi
from tvm import tirx
from tvm.script.ir_builder import tirx as Tb

from . import ra
from .adjoint_emit import Unsupported
from .dot_bf16 import PAIR_STORAGE, pair_bits, pair_decode
from .tir_builder import row_elements, uses


#: float32 lanes in a 64-byte cache line: the width of the copies' panels
LINE_LANES = 16


class Transposed:
    """The layout of a weight's copy that the level pass reads in place of the weight where a
    vector runs along one axis of it (`axis`: here the first, a transpose): the recomputation's
    reads w[b * block + inner, k] (TreeLSTM's U[g * H + i, k] for gates_sum[n, g, i]) become
    contiguous loads.  With `block`, each block's `block` columns are widened to whole cache
    lines (`padded`) and laid out in panels of LINE_LANES columns, (panels, K, LINE_LANES): a
    vector of a tile's chunk lies in one panel, and the steps of its sum (k) follow one another
    in memory.  block None: the plain transpose (K, rows) (a GPU's).

    Example: w (10, 3) read as w[g * 5 + i, k] (block 5): its copy is (2, 3, 16), one panel per
    block of 5 padded to 16; w[7, k] (g = 1, i = 2) lies at [1, k, 2]."""

    #: the weight's axis along which the vectors run (the copy's last)
    axis = 0

    def __init__(self, weight_shape, block=None, pairs: bool = False):
        self.block = block
        self.padded = None if block is None else -(-block // LINE_LANES) * LINE_LANES
        rows, other = int(weight_shape[self.axis]), int(weight_shape[1 - self.axis])
        self.blocks = 1 if block is None else rows // block
        #: whether the copy holds bfloat16 pairs along its middle axis (`adjoint_bf16`): element
        #: [p, k // 2, c] a uint32 of the values at k (low half) and k + 1 (high half)
        self.pairs = pairs and block is not None and other % 2 == 0
        self.dtype = PAIR_STORAGE if self.pairs else "float32"
        self.shape = ((other, rows) if block is None
                      else (self.blocks * self.padded // LINE_LANES, other // 2 if self.pairs else other, LINE_LANES))

    def at(self, which, inner, other) -> list:
        """The copy's indices of the weight's element `inner` of block `which` along `axis`,
        `other` along the other axis."""
        if self.block is None:               # (one block: `which` is 0)
            return [other, inner]
        return [which * (self.padded // LINE_LANES) + tirx.floordiv(inner, LINE_LANES), other,
                tirx.floormod(inner, LINE_LANES)]

    def load(self, buf, indices, inner):
        """The float32 value of the weight's element at `indices` (see `index`) read from the copy
        `buf`: a pair copy's half of its word, widened."""
        at = self.index(indices, inner)
        if not self.pairs:
            return tirx.BufferLoad(buf, at)
        return pair_decode(buf, at)

    def covers(self, indices, inner) -> bool:
        """Whether `index` maps the read at `indices` (b * block + inner along `axis`)."""
        return self.block is None or _block_start(tvm.sym.Analyzer(), indices[self.axis], inner, self.block) is not None

    def index(self, indices, inner) -> list:
        """The copy's indices of the weight's element at `indices` (expressions of the block's
        axes, `inner` among them): indices[axis] = b * block + inner."""
        along, other = indices[self.axis], indices[1 - self.axis]
        if self.block is None:
            return self.at(0, along, other)
        analyzer = tvm.sym.Analyzer()
        rest = _block_start(analyzer, along, inner, self.block)
        if rest is None:
            raise Unsupported(f"a copied weight's index {along} is not b * {self.block} + {inner}")
        return self.at(analyzer.simplify(tirx.floordiv(rest, self.block)), inner, other)


def _block_start(analyzer, along, var, block):
    """`along` - `var` where that is a multiple of `block` free of `var` (along = b * block +
    var), else None."""
    rest = analyzer.simplify(along - var)
    return None if uses(rest, var) or not analyzer.can_prove(tirx.floormod(rest, block) == 0) else rest


class Widened(Transposed):
    """`Transposed`'s panels without the transpose: the copy of a weight (K, rows) that a
    backward nest reads with its vector along the weight's last axis, w[k, b * block + inner]
    (TreeLSTM's d h[child, j, k] from U[g * H + i, j * H + k]: U (5H, 2H) -> (2 x 160 / 16, 5H,
    16) at h = 150, each block of a row's columns widened to lines and cut into panels).

    Example: w (3, 10) read as w[k, g * 5 + i]: the copy is (2, 3, 16), w[k, 7] at [1, k, 2]."""

    axis = 1


def copied_reads(emitter) -> tuple:
    """({weight: (its stage buffer, block)}, {weight: block}): the 2-D weights some block of
    `emitter`'s stage (`StageEmitter`) reads with the vector axis it writes along in their first
    index only (TreeLSTM's U[g*H + i, j*H + k] computing gates_sum[n, g, i]), whose transposes the
    recomputation reads (`Transposed`: a vector of lanes one contiguous load), and those it reads
    as w[r, b * E + v] (v an axis of extent E, r free of v and of any node input), whose copies
    with widened blocks the backward's nests along v read (`Widened`).  block: the vector
    axis's extent E where every such read of the weight is b * E + the axis and E divides that
    dimension (the copy's blocks of columns then start on cache lines, in panels), else None
    (transposes) or no copy (`Widened`)."""
    transposed, blocks, widened = {}, {}, {}
    analyzer = tvm.sym.Analyzer()

    def block_of(along, var, extent, size):
        fits = extent is not None and size % extent == 0 and _block_start(analyzer, along, var, extent) is not None
        return extent if fits else None

    for block in emitter.blocks:
        inner = block.out_indices[-1] if len(block.out_indices) > 1 else None
        extents = {v: int(ext) for v, ext in block.axes if isinstance(ext, tvm.tirx.IntImm)}

        def visit(ld):
            key = next((k for k, buf in emitter.stage.placeholders.items() if buf.same_as(ld.source)), None)
            if not isinstance(key, ra.Weight) or len(key.shape) != 2:
                return
            first, last = ld.indices
            if inner is not None and uses(first, inner) and not uses(last, inner):
                transposed[key] = emitter.stage.placeholders[key]
                extent = next((e for v, e in extents.items() if v.same_as(inner)), None)
                blocks.setdefault(key, set()).add(block_of(first, inner, extent, int(key.shape[0])))
            if emitter.reads_node(ld):               # (an embedding's rows by word: never copied)
                widened.setdefault(key, set()).add(None)
                return
            for var, extent in extents.items():
                if uses(last, var) and not uses(first, var):
                    fit = block_of(last, var, extent, int(key.shape[1]))
                    if fit is not None:
                        widened.setdefault(key, set()).add(fit)
                        break
        tvm_ffi.structural_walk(block.body, (tvm.ir.TensorLoad, visit), order="post")
    single = {key: next(iter(found)) for key, found in widened.items() if len(found) == 1}
    return ({key: (buf, next(iter(blocks[key])) if len(blocks[key]) == 1 else None)
             for key, buf in transposed.items()},
            {key: block for key, block in single.items() if block is not None})


def emit_transpose(source, out, layout, tile: int = 16):
    """out[layout.at(b, r, c)] = source[b * block + r, c] (`Transposed`), in tiles of `tile` x
    `tile` elements (each tile's rows and columns a few cache lines) shared among the cores, a
    block of the layout's at a time.  Within a tile each source row is read along its columns and
    written down the copy's rows, one lane each: LLVM then makes plain loads and stores, where the
    other order (a copy's row, lane by lane, from `tile` source rows) became gathers, 1.3-1.6x
    slower on Zen 4 at h = 150 (U, 750 x 300: 33 against 41 us with warm caches, 50 against 73
    just after the weight was written; W alike; `docs/bench-2026-12-07/transpose/`).
    numpy's strided copy of U and W (450 x 300, x = 300), on one core, cost 0.15-0.26 ms a
    training step more than the tiles on Zen 4 (docs/training.md, "Speed")."""
    rows, cols = (int(d) for d in source.shape)
    block = rows if layout.block is None else layout.block
    if layout.pairs:
        _emit_transpose_pairs(source, out, layout)
        return
    row_tiles = -(-block // tile)
    with Tb.parallel(0, layout.blocks * row_tiles) as block_tile:
        which, row_tile = (0, block_tile) if layout.blocks == 1 else (block_tile // row_tiles, block_tile % row_tiles)
        with Tb.serial(0, -(-cols // tile)) as col_tile:
            with Tb.serial(0, tile) as r:
                row = row_tile * tile + r
                with _inside(row < block, block % tile):
                    with Tb.serial(0, tile) as c:
                        col = col_tile * tile + c
                        with _inside(col < cols, cols % tile):
                            Tb.buffer_store(out, source[which * block + row, col], layout.at(which, row, col))


def _emit_transpose_pairs(source, out, layout):
    """`emit_transpose` into a pair copy: each word of a copy's row from two neighbours of a
    source row, the rows shared among the cores."""
    with Tb.parallel(0, layout.blocks * layout.block) as flat:
        which, row = flat // layout.block, flat % layout.block
        with Tb.serial(0, int(source.shape[1]) // 2) as pair:
            at = layout.at(which, row, pair * 2)
            Tb.buffer_store(out, pair_bits(source[flat, pair * 2], source[flat, pair * 2 + 1]),
                            [at[0], pair, at[2]])


@contextlib.contextmanager
def _inside(bound, ragged: bool):
    """The body under `bound` where the tiles overrun their extent (`ragged`), else as it is."""
    if not ragged:
        yield
        return
    with Tb.If(bound):
        with Tb.Then():
            yield


def emit_widen(source, out, layout, lanes):
    """out[layout.at(b, i, r)] = source[r, b * layout.block + i] (`Widened`), the rows shared
    among the cores; a pair copy's word from two rows, r and r + 1."""
    if layout.pairs:
        with Tb.parallel(0, int(source.shape[0]) // 2) as pair:
            with Tb.serial(0, layout.blocks) as which:
                row_elements([layout.block], lanes, lambda ix: Tb.buffer_store(
                    out, pair_bits(source[pair * 2, which * layout.block + ix[0]],
                                   source[pair * 2 + 1, which * layout.block + ix[0]]),
                    layout.at(which, ix[0], pair)))       # (word `pair` of the copy's row: rows 2 pair, 2 pair + 1)
        return
    with Tb.parallel(0, int(source.shape[0])) as row:
        with Tb.serial(0, layout.blocks) as which:
            row_elements([layout.block], lanes, lambda ix: Tb.buffer_store(
                out, source[row, which * layout.block + ix[0]], layout.at(which, ix[0], row)))
