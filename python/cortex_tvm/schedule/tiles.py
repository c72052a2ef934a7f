"""Register tiles: `tile_gemm`, a per-node matrix-vector block as a GEMM micro-kernel with its
consumers (the epilogue) computed inside the tile."""
from __future__ import annotations

import tvm
import tvm_ffi

from .. import level_tails as _tails
from .core import REDUCE as _REDUCE
from .core import SPATIAL as _SPATIAL
from .core import ScheduleError, primitive
from .state import State


class TilePrimitives:

    #: blocks register-tiled so far (tile_gemm), in order: what parallel_columns parallelizes
    tiled = State([])

    @primitive
    def tile_gemm(self, block: str, node_tile: int = 3, column_tile: int = 64, lanes: int = 16,
                  k_unroll: int = 8):
        """Register-tile a per-node matrix-vector block as a GEMM micro-kernel, epilogue included.

        The block `out[j, ..., r] += A[j, k] * B[..., r, k]` over the level's
        nodes j gets loops (r_tile, j_tile, k..., j in node_tile, middle axes,
        r in column_tile), the last `lanes` columns vectorized and the rest of
        the tile unrolled: node_tile x middle x column_tile accumulators stay
        in registers for the whole reduction.  Axes between the node and the
        last one (an LSTM's gate axis) are computed whole inside each tile.
        Then its consumers (bias add, then the state updates) are computed in
        the same tile, as far as each one's inputs are all produced there:
        the epilogue runs from the accumulators.  The reduction's init is
        split off when the schedule is built.

        Requires: a reduction block with loops (node, spatial..., reduce...),
        not transformed yet; last spatial extent divisible by column_tile,
        column_tile by lanes.  pad_levels(node_tile) avoids bounds checks.

        Examples
        --------
        Before (TreeLSTM, gates[n, g, i] for 5 gates x 256 units)::

            for j, g, i, c, k in T.grid(n, 5, 256, 2, 256): gates_sum[j, g, i] += U[...] * h[children[..., c], k]
            for j, g, i in T.grid(n, 5, 256): gates[j, g, i] = gates_sum[j, g, i] + bU[g * 256 + i]
            for j, i in T.grid(n, 256): c[...] = ...        # then h[...] = ...

        ``rs.tile_gemm("gates_sum", node_tile=3, column_tile=16)``; after::

            for i_0 in range(16):                        # column tiles
              for j_0 in range(n // 3):                  # node tiles
                for c, k_0 in T.grid(2, 32):
                  for k_1, j_1, g, i_1 in T.grid(8, 3, 5, 1):     # unrolled; 15 accumulators
                    for i_2 in T.vectorized(16): gates_sum[...] += ...
                for ax0, ax1, ax2 in T.grid(3, 5, 16): gates[...] = ...        # epilogue in the tile
                for ax0, ax1 in T.grid(3, 16): c[...] = ...
                for ax0, ax1 in T.grid(3, 16): h[...] = ...
        """
        for name, v in (("node_tile", node_tile), ("column_tile", column_tile), ("lanes", lanes),
                        ("k_unroll", k_unroll)):
            if v < 1:
                raise ScheduleError(f"tile_gemm: {name} must be a positive int, got {v!r}")
        b, loops, kinds = self._block_loops(block)
        spatial = [l for l, k in zip(loops, kinds) if k == _SPATIAL]
        reduce = [l for l, k in zip(loops, kinds) if k == _REDUCE]
        if len(spatial) < 2 or not reduce or kinds != sorted(kinds):
            raise ScheduleError(f"tile_gemm: {block!r} is not a (node, spatial..., reduce...) reduction block")
        node, middle, column = spatial[0], spatial[1:-1], spatial[-1]
        sch = self.sch
        columns = sch.get(column).extent
        if not isinstance(columns, tvm.tirx.IntImm) or columns.value % column_tile or column_tile % lanes:
            raise ScheduleError(f"tile_gemm: column_tile {column_tile} must divide the {columns} columns "
                                f"of {block!r} and be a multiple of lanes {lanes}")
        node_outer, node_inner = sch.split(node, [None, node_tile])
        col_outer, col_inner = sch.split(column, [None, column_tile])
        col_unrolled, col_lanes = sch.split(col_inner, [None, lanes])
        last = reduce[-1]
        k_extent = sch.get(last).extent
        if isinstance(k_extent, tvm.tirx.IntImm) and k_unroll > 1 and k_extent.value % k_unroll == 0:
            k_outer, k_inner = sch.split(last, [None, k_unroll])
            reduce_loops = reduce[:-1] + [k_outer, k_inner]
            sch.unroll(k_inner)
        else:
            reduce_loops = reduce
        sch.reorder(col_outer, node_outer, *reduce_loops, node_inner, *middle, col_unrolled, col_lanes)
        sch.vectorize(col_lanes)
        for loop in (col_unrolled, node_inner, *middle):
            sch.unroll(loop)
        self._fuse_consumers(block, node_tile, column_tile, lanes)
        self._pending_decompose.append((block, 2))     # reduction init goes above the first k loop
        self.tiled.append(block)
        return self

    def _fuse_consumers(self, block, node_tile, column_tile, lanes):
        """Compute the block's consumers, transitively, inside its (column tile, node tile) loops.

        A consumer goes in by reverse_compute_at when TVM can derive its
        iterations from the tile's region; an elementwise (node, column)
        consumer that reads the tile at constant middle indices (an LSTM
        epilogue reading gates[n, 3, i]), which TVM's region solver rejects,
        gets the same (column tile, node tile) loops by split and reorder and
        is merged into the tile's loops: correct because it reads only the
        tile's own columns and nodes.

        Blocks are taken in program order, starting right after the tile, and
        the first one that cannot go in ends the fusion: a merge moves the
        tile down to the consumer, so a block left between them (a reduction
        reading what the tile computes, say) would read it too early.
        """
        sch = self.sch
        names = self.block_names()
        before = set(names[:names.index(block)])        # computed before the tile: ready
        placed = {block}
        for name in names[names.index(block) + 1:]:
            if _tails.node_set(name) != _tails.node_set(block):
                continue          # another tail's copy (level_tails): other nodes, independent of the tile
            b = self._block(name)
            if any(iv.iter_type == _REDUCE for iv in sch.get(b).iter_vars):
                return                # another GEMM gets its own tile, not a place in this one
            producers = {sch.get(p).name_hint for p in sch.get_producers(b)}
            if not producers & placed or not producers <= placed | before:
                return
            if not (self._reverse_compute_at_tile(block, b, lanes)
                    or self._merge_into_tile(block, b, node_tile, column_tile, lanes)):
                return
            placed.add(name)

    def _reverse_compute_at_tile(self, block, consumer, lanes):
        sch = self.sch
        if not self._reads_tile_elementwise(consumer, self._written_by(block, consumer)):
            # TVM's region solver over-approximates a read like gates[n, c * H + i] by a box
            # and would compute elements whose inputs the tile has not produced yet
            return False
        try:
            sch.reverse_compute_at(consumer, sch.get_loops(self._block(block))[1])
        except (tvm.s_tir.ScheduleError, ValueError):   # region solver failures are ValueErrors
            return False
        self._vectorize_innermost(consumer, lanes)
        return True

    def _merge_into_tile(self, block, consumer, node_tile, column_tile, lanes):
        sch = self.sch
        gemm = self._block(block)
        kinds = [iv.iter_type for iv in sch.get(consumer).iter_vars]
        loops = sch.get_loops(consumer)
        if kinds != [_SPATIAL, _SPATIAL] or len(loops) != 2:
            return False
        columns = sch.get(loops[1]).extent
        gemm_columns = sch.get(gemm).iter_vars[-1 - self._num_reduce(gemm)].dom.extent
        if (not isinstance(columns, tvm.tirx.IntImm) or columns.value % column_tile
                or not isinstance(gemm_columns, tvm.tirx.IntImm) or gemm_columns.value != columns.value):
            return False          # the tile's columns are not the consumer's columns
        if not self._reads_tile_columns_only(consumer, placed_buffers=self._written_by(block, consumer)):
            return False
        node_outer, node_inner = sch.split(loops[0], [None, node_tile])
        col_outer, col_inner = sch.split(loops[1], [None, column_tile])
        sch.reorder(col_outer, node_outer, node_inner, col_inner)
        try:
            sch.merge(sch.get_loops(gemm)[0], col_outer)
            sch.merge(sch.get_loops(gemm)[1], sch.get_loops(consumer)[1])
        except (tvm.s_tir.ScheduleError, ValueError):
            return False
        self._vectorize_innermost(consumer, lanes)
        return True

    def _num_reduce(self, block):
        return sum(iv.iter_type == _REDUCE for iv in self.sch.get(block).iter_vars)

    def _written_by(self, block, consumer):
        """Buffers written by the tiled block and by blocks already placed in its tile."""
        sch = self.sch
        loop = sch.get_loops(self._block(block))[1]
        names = set()
        tvm_ffi.structural_walk(sch.get(loop), (tvm.s_tir.stmt.SBlock,
                                                lambda b: names.update(w.source.name for w in b.writes)))
        return names

    def _tile_reads(self, consumer, placed_buffers):
        """(the consumer's iterator vars, the index lists of its reads of tile buffers)."""
        block = self.sch.get(consumer)
        reads = []

        def on_load(ld):
            if ld.source.name in placed_buffers:
                reads.append(list(ld.indices))
        tvm_ffi.structural_walk(block.body, (tvm.ir.TensorLoad, on_load))
        return [iv.var for iv in block.iter_vars], reads

    def _reads_tile_elementwise(self, consumer, placed_buffers):
        """Every read of a tile buffer is at exactly the consumer's own iterators, in order."""
        own, reads = self._tile_reads(consumer, placed_buffers)
        return all(len(idx) == len(own) and all(i.same_as(v) for i, v in zip(idx, own)) for idx in reads)

    def _reads_tile_columns_only(self, consumer, placed_buffers):
        """Every read of a tile buffer is [node, constants..., column] at the consumer's own
        node and column: then the consumer needs exactly its tile's values."""
        (node_var, column_var), reads = self._tile_reads(consumer, placed_buffers)

        def is_node(e):
            if isinstance(e, tvm.ir.prim.expr.Add) and getattr(e.a, "source", None) is not None:
                e = e.b                           # level_offsets[l] + j (not dense_index'ed)
                if isinstance(e, tvm.ir.prim.expr.Add) and _tails.is_tail_base(e.a):
                    e = e.b                       # a tail's node: level_offsets[l] + (base + j)
            return e.same_as(node_var)
        return all(is_node(idx[0]) and idx[-1].same_as(column_var)
                   and all(isinstance(x, tvm.tirx.IntImm) for x in idx[1:-1]) for idx in reads)
