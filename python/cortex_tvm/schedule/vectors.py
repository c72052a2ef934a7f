"""Vector primitives: elementwise stages and reductions that are not GEMMs against a weight,
vectorized over their output (and, for a reduction whose broadcast operand is a weight row,
register-tiled over rows and column vectors)."""
from __future__ import annotations

import tvm

from .core import REDUCE as _REDUCE
from .core import SPATIAL as _SPATIAL
from .core import ScheduleError, primitive



class VectorPrimitives:

    def _vectorize_innermost(self, block, lanes):
        sch = self.sch
        inner = sch.get_loops(block)[-1]
        extent = sch.get(inner).extent
        if isinstance(extent, tvm.tirx.IntImm) and extent.value % lanes == 0:
            _, vec = sch.split(inner, [None, lanes])
            sch.vectorize(vec)

    @primitive
    def vectorize_block(self, block: str, lanes: int = 16):
        """Vectorize the innermost output loop of an elementwise block by `lanes`.

        Examples
        --------
        Before: ``for j, i in T.grid(n, 256): c[...] = ...``;
        ``rs.vectorize_block("internal_c")``; after::

            for j, i_0 in T.grid(n, 16):
                for i_1 in T.vectorized(16): c[...] = ...
        """
        if lanes < 1:
            raise ScheduleError(f"vectorize_block: lanes must be a positive int, got {lanes!r}")
        b, loops, kinds = self._block_loops(block)
        if any(k != _SPATIAL for k in kinds):
            raise ScheduleError(f"vectorize_block: {block!r} is a reduction; use tile_gemm")
        extent = self.sch.get(loops[-1]).extent
        if not isinstance(extent, tvm.tirx.IntImm) or extent.value % lanes:
            raise ScheduleError(f"vectorize_block: innermost extent {extent} of {block!r} is not a "
                                f"multiple of {lanes}")
        _, vec = self.sch.split(loops[-1], [None, lanes])
        self.sch.vectorize(vec)
        return self

    @primitive
    def vectorize_reduction(self, block: str, lanes: int = 16, rows: int = 1, vectors: int = 1):
        """Vectorize a reduction that is not a GEMM against a weight over its last output axis;
        with `rows` / `vectors`, register-tile it: rows x vectors accumulators per step.

        The reduction loops move inside the output loops, and the last output
        axis is vectorized: each reduction step updates `lanes` outputs at once
        (a child sum, or a per-node matrix times a vector).  `vectors` > 1 keeps
        that many vectors of the last axis, and `rows` > 1 that many indices of
        the axis before it, in flight together (unrolled): a per-node matrix
        product `out[n, i, j] += W[i, k] * B[n, k, j]` then loads each B vector
        once for `rows` rows and each W[i, k] once for `vectors` vectors, and
        the accumulators stay in registers for the whole reduction.  The init
        is split off when the schedule is built.

        Requires: a reduction block, not transformed yet, whose last output
        extent is a multiple of lanes x vectors; with rows > 1, an output axis
        between the node and the last one whose extent is a multiple of rows.

        Examples
        --------
        Before::

            for j, i, c in T.grid(n, 256, 4): h_sum[j, i] += h[children[..., c], i]

        ``rs.vectorize_reduction("h_sum", lanes=16)``; after::

            for j, i_0, c in T.grid(n, 16, 4):
                for i_1 in T.vectorized(16): h_sum[j, i_0 * 16 + i_1] += h[children[..., c], i_0 * 16 + i_1]

        MV-RNN's ``A_sum[n, i, j] += WM[i, q * 64 + k] * A[child(n, q), k, j]`` with
        ``rs.vectorize_reduction("internal_A_sum", lanes=8, rows=4, vectors=2)``::

            for n, i_0, j_0, q, k in T.grid(size, 16, 4, 2, 64):
                for i_1, j_1 in T.grid(4, 2):                       # unrolled: 8 accumulators
                    for j_2 in T.vectorized(8): A_sum[...] += WM[i_0 * 4 + i_1, q * 64 + k] * A[...]
        """
        if lanes < 1 or rows < 1 or vectors < 1:
            raise ScheduleError(f"vectorize_reduction: lanes, rows and vectors must be positive ints, got "
                                f"{lanes!r}, {rows!r}, {vectors!r}")
        b, loops, kinds = self._block_loops(block)
        spatial = [l for l, k in zip(loops, kinds) if k == _SPATIAL]
        reduce = [l for l, k in zip(loops, kinds) if k == _REDUCE]
        if not reduce or len(spatial) < 2 or kinds != sorted(kinds):
            raise ScheduleError(f"vectorize_reduction: {block!r} is not a (node, spatial..., reduce...) "
                                "reduction block")
        extent = self.sch.get(spatial[-1]).extent
        if not isinstance(extent, tvm.tirx.IntImm) or extent.value % (lanes * vectors):
            raise ScheduleError(f"vectorize_reduction: last output extent {extent} of {block!r} is not a "
                                f"multiple of lanes x vectors = {lanes * vectors}")
        if rows > 1:
            row_extent = self.sch.get(spatial[-2]).extent if len(spatial) > 2 else None
            if not isinstance(row_extent, tvm.tirx.IntImm) or row_extent.value % rows:
                raise ScheduleError(f"vectorize_reduction: {block!r} has no output axis before the last whose "
                                    f"extent is a multiple of rows = {rows}")
        sch = self.sch
        outer, inner = list(spatial[:-1]), []
        if rows > 1:
            row_outer, row_inner = sch.split(spatial[-2], [None, rows])
            outer, inner = [*spatial[:-2], row_outer], [row_inner]
        if vectors > 1:
            col_outer, col_unrolled, vec = sch.split(spatial[-1], [None, vectors, lanes])
            inner.append(col_unrolled)
        else:
            col_outer, vec = sch.split(spatial[-1], [None, lanes])
        sch.reorder(*outer, col_outer, *reduce, *inner, vec)
        for loop in inner:
            sch.unroll(loop)
        sch.vectorize(vec)
        self._pending_decompose.append((block, len(spatial)))   # init above the first reduction loop
        return self
