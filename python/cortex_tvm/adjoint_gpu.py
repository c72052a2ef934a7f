"""The compiled backward laid out for a GPU: a level's nodes on thread blocks, a nest's
elements on the threads of its node's block.

`GpuStageEmitter` is `adjoint_emit.StageEmitter` (the same stages, rules and nests) with the
three things that say where the work runs replaced:

* `_runs`: node p of a level on thread block p (`blockIdx.x`), the grid as large as the batch's
  slots (host-known, from the state arrays' shape) with the blocks past the level's size idle
  (a level's size lives in device memory); the serial twin (a node shared by two parents) runs
  the level's nodes in turn on one block;
* `_nest`: each element a nest writes on a thread (`threadIdx.x`, THREADS of them striding
  over the elements), the block's axes the element does not index summed in the thread's own
  register; every nest ends in a barrier of the block, because the next one reads what it
  wrote (a node's nests depend on its own earlier ones, never on another node's);
* `_elements`: the same for zeroing a node's rows and adding its state adjoints.

Each `_runs` becomes one kernel (TVM's host/device split); the level loop stays on the host,
so the levels are ordered by their launches.  The weights' sums over all nodes
(`emit_weight_read`) put one element of the sum on a thread, the nodes in turn; the embedding's
rows (`emit_add_rows`) go by word on one block, each thread its own columns, the nodes in a
fixed order: no atomics, the same result every run.  A TreeLSTM level::

    for level in range(levels - 2, 0, -1):                     # host
        for p in blockIdx.x (N blocks):  if p < size(level):    # a kernel
            zero the node's adjoint rows; add its state adjoints   (threads, then a barrier)
            for each nest:  for e in threadIdx.x strided:  acc = sum(...); d[...] += acc
                            barrier
"""
from __future__ import annotations

import contextlib
import math

from tvm import tirx
from tvm.script.ir_builder import tirx as Tb

from .adjoint_emit import StageEmitter
from .adjoint_nest import POSITION, ROW
from .adjoint_weights import with_adjoint
from .linearize import NULL_SLOT
from .tir_builder import axes_grid, unravel

#: threads of a node's block (and of a weight sum's blocks)
THREADS = 128


def barrier():
    """__syncthreads(): the block's writes are seen by all of its threads after it."""
    Tb.evaluate(tirx.call_intrin("int32", "tirx.tvm_storage_sync", "shared"))


class GpuRun:
    """One node of a level, while its block's nests are built: its position in the level and
    its row (the `adjoint_runs.Run` and `Tile` interface, for one node)."""

    tile_size = 1

    def __init__(self, position, offset, size, row_base):
        self.position, self.offset, self.size = position, offset, size
        self.row = row_base + position

    def node(self, t):
        return self.position, self.row

    @contextlib.contextmanager
    def nodes(self, positions=False, tile_index=False):
        first = (self.position, self.row) if positions else (self.row, self.offset + self.position)
        yield first + ((0,) if tile_index else ())

    def each(self, body):
        body(self)


def thread_elements(shape, body):
    """body(index list) for every element of `shape`, each on one of THREADS threads, then a
    barrier."""
    total = math.prod(int(d) for d in shape)
    with Tb.thread_binding(0, THREADS, "threadIdx.x") as thread:
        with Tb.serial(0, (total + THREADS - 1) // THREADS) as step:
            flat = step * THREADS + thread
            with Tb.If(flat < total):
                with Tb.Then():
                    body(unravel(flat, [int(d) for d in shape]))
    barrier()


class GpuStageEmitter(StageEmitter):
    """`StageEmitter` whose nests run on a GPU (see the module docstring); `grid`: the thread
    blocks of a level's kernel, at least its largest level (the batch's slots)."""

    def __init__(self, stage, numpy_stage, grid):
        super().__init__(stage, numpy_stage, lanes=1, shares=1)
        self.grid = grid

    def _runs(self, offset, size, row_base, parallel: bool, body):
        if parallel:
            with Tb.thread_binding(0, self.grid, "blockIdx.x") as position:
                with Tb.If(position < size):
                    with Tb.Then():
                        body(GpuRun(position, offset, size, row_base))
        else:                                   # a node shared by two parents: in turn
            with Tb.thread_binding(0, 1, "blockIdx.x"):
                with Tb.serial(0, size) as position:
                    body(GpuRun(position, offset, size, row_base))

    def _nest(self, block, indices, coeff, bufs, run, write, skip_null=None):
        """`coeff` summed over the block's axes `indices` do not use, then `write(rewrite,
        value)` at each element they index: one element per thread."""
        used = block.used_axes(indices)
        summed = block.summed_axes(used)

        def rewriter(mapping):
            mapping = {**mapping, block.position: run.position, ROW: run.row, POSITION: run.position}
            return lambda e: self.rewrite(e, bufs, mapping, run.offset, run.size)

        def element(index):
            at = dict(zip([v for v, _ in used], index))
            rewrite = rewriter(at)

            def compute():
                if not summed:
                    write(rewrite, rewrite(coeff))
                    return
                acc = Tb.alloc_buffer((1,), "float32", scope="local")
                Tb.buffer_store(acc, tirx.const(0.0, "float32"), [0])
                axes_grid(summed, lambda m: Tb.buffer_store(acc, acc[0] + rewriter({**at, **m})(coeff), [0]))
                write(rewrite, acc[0])
            if skip_null is None:
                compute()
            else:                               # a missing child's row: nobody reads its adjoint
                with Tb.If(rewrite(skip_null) != NULL_SLOT):
                    with Tb.Then():
                        compute()
        thread_elements([ext for _, ext in used], element)

    def _elements(self, shape, body, vector: bool = False):
        thread_elements(shape, body)


def emit_weight_read(emitter, block, stand_in, load, coeff, axes, out, bufs, offset, count):
    """`adjoint_weights.emit_weight_read` on a GPU: each element of `out` (over `axes`) on a
    thread, adding the read's gradient of the stage's nodes [offset, offset + count) in turn."""
    summed = block.summed_axes(axes)
    adj = bufs["adj"][block.key]
    total = math.prod(int(ext) for _, ext in axes)

    def rewrite(e, mapping, n):
        mapping = {**mapping, block.position: n, ROW: n, POSITION: n}
        return emitter.rewrite(with_adjoint(e, stand_in, adj), bufs, mapping, offset, count)

    with Tb.thread_binding(0, (total + THREADS - 1) // THREADS, "blockIdx.x") as b:
        with Tb.thread_binding(0, THREADS, "threadIdx.x") as thread:
            flat = b * THREADS + thread
            with Tb.If(flat < total):
                with Tb.Then():
                    index = unravel(flat, [int(ext) for _, ext in axes])
                    at = dict(zip([v for v, _ in axes], index))
                    acc = Tb.alloc_buffer((1,), "float32", scope="local")
                    Tb.buffer_store(acc, out[index], [0])
                    with Tb.serial(0, count) as n:
                        axes_grid(summed, lambda m: Tb.buffer_store(
                            acc, acc[0] + rewrite(coeff, {**at, **m}, n), [0]))
                    Tb.buffer_store(out, acc[0], index)


def emit_add_rows(grad, rows, by, offset, count, last=None):
    """grad[by[offset + n], ...] += rows[n, ...] for n in range(count), in order: one block,
    each thread its own elements of a row, so no two threads write one element; with `last`, at
    row min(by[offset + n], last) (`ra.NodeInput.last_row`)."""
    def add(ix):
        with Tb.serial(0, count) as n:
            at = by[offset + n] if last is None else tirx.min(by[offset + n], last)
            Tb.buffer_store(grad, grad[[at] + ix] + rows[[n] + ix], [at] + ix)
    with Tb.thread_binding(0, 1, "blockIdx.x"):
        thread_elements([int(d) for d in grad.shape[1:]], add)
