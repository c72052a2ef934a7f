"""Loop primitives built from TVM's s_tir ones, addressed by block name: parallel loops
(`parallel_columns`, `parallel_nodes`), the level loop (`unroll_levels`) and `peel`; the register
tile is `tiles.py`'s."""
from __future__ import annotations

from dataclasses import replace

import tvm
import tvm_ffi
from tvm import tirx

from .core import ScheduleError, primitive, renamed
from .layout import packed_name
from .state import State


class LoopPrimitives:

    #: levels per step of the level loop (unroll_levels)
    unroll_depth = State(1)

    @primitive
    def parallel_columns(self, weight: str):
        """Run the column tiles of every tiled block reading `weight` in parallel across cores.

        The column-tile loop (the outermost loop of a tile_gemm block, inside
        the level loop) becomes `T.parallel`.  TVM's static partition hands
        each core the same tiles at every level, so each core reads the same
        share of the weight level after level and that share stays in its own
        cache (half of a 256-unit TreeLSTM's U is 1.3 MB, which fits one
        core's L2 here) instead of every core streaming all of it.

        Requires: `weight` packed (pack) and at least one block reading it
        register-tiled (tile_gemm).

        Parameters
        ----------
        weight : str   name of the weight parameter (e.g. "U")

        Returns
        -------
        self

        Raises
        ------
        ScheduleError  `weight` not packed, or no tiled block reads it

        Examples
        --------
        Before (after ``pack("U", tile=64)`` and ``tile_gemm("gates_sum", column_tile=64)``)::

            for l in range(1, L):                      # "level"
                for r_0 in range(20):                  # column tiles of U
                    for j_0 in range(n // 3): ...      # node tiles, the GEMM and its epilogue

        ``rs.parallel_columns("U")``; after::

            for l in range(1, L):
                for r_0 in T.parallel(20):
                    for j_0 in range(n // 3): ...
        """
        if self.plan.recursion_depth > 1:
            raise ScheduleError("parallel_columns: the chunks of unroll_recursion are the parallel loop; a "
                                "parallel loop inside them would nest")
        if not any(p[0] == weight for p in self.plan.packs):
            raise ScheduleError(f"parallel_columns: pack {weight!r} first (its column tiles are what "
                                "runs in parallel)")
        readers = [name for name in self.tiled if self.has_block(name) and self._reads(name, packed_name(weight))]
        if not readers:
            raise ScheduleError(f"parallel_columns: no tiled block reads {weight!r}; apply tile_gemm first")
        for name in readers:
            self.sch.parallel(self.sch.get_loops(self._block(name))[0])
        return self

    persist = renamed("persist", parallel_columns)

    @primitive
    def parallel_nodes(self, block: str):
        """Run a stage's node loop in parallel across cores: each core takes a share of the level's nodes.

        The other axis of parallelism: parallel_columns splits a GEMM's
        output columns, so every core streams its own share of the weight;
        a stage that is not a weight GEMM (MV-RNN's per-node matrix product
        W_M [A_l; A_r], a child sum) has no columns to split and otherwise
        runs on one core.  TVM's static partition gives each core a
        contiguous range of the level's nodes.

        Requires: `block` in the level scope, its outermost loop over nodes
        (not a tile_gemm block: use parallel_columns).

        Parameters
        ----------
        block : str   name of the stage's block

        Returns
        -------
        self

        Raises
        ------
        ScheduleError  no such block in the level, a tiled block, or an outer loop that is not
                       the node loop

        Examples
        --------
        Before (MV-RNN after ``vectorize_reduction("internal_A_sum", lanes=8, rows=4, vectors=2)``)::

            for l in range(1, L):
                for n, i_0, j_0, q, k in T.grid(size, 16, 4, 2, 64): ...     # A_sum[n, ...] += ...

        ``rs.parallel_nodes("internal_A_sum")``; after::

            for l in range(1, L):
                for n in T.parallel(size):
                    for i_0, j_0, q, k in T.grid(16, 4, 2, 64): ...
        """
        if self.plan.recursion_depth > 1:
            raise ScheduleError("parallel_nodes: the chunks of unroll_recursion are the parallel loop; a "
                                "parallel loop inside them would nest")
        if block not in self.block_names("level"):
            raise ScheduleError(f"parallel_nodes: no block {block!r} in the level; blocks are "
                                f"{self.block_names('level')}")
        if block in self.tiled:
            raise ScheduleError(f"parallel_nodes: {block!r} is register-tiled; its column tiles run in "
                                "parallel with parallel_columns")
        node_loop = self.sch.get_loops(self._block(block))[0]
        if not self._binds_node(block, self.sch.get(node_loop).loop_var):
            raise ScheduleError(f"parallel_nodes: the outer loop of {block!r} is not its node loop")
        self.sch.parallel(node_loop)
        return self

    def _binds_node(self, block, var) -> bool:
        """Whether `var` appears in the binding of the block's first (node) iterator."""
        found = []

        def on_realize(r):
            if r.block.name_hint == block:
                tvm_ffi.structural_walk(r.iter_values[0], (tirx.Var, lambda v: found.append(v.same_as(var))))
        tvm_ffi.structural_walk(self.func, (tvm.s_tir.stmt.SBlockRealize, on_realize))
        return any(found)

    def _reads(self, block, buffer_name):
        found = []

        def on_load(ld):
            if ld.source.name == buffer_name:
                found.append(ld)
        tvm_ffi.structural_walk(self.sch.get(self._block(block)).body, (tvm.ir.TensorLoad, on_load))
        return bool(found)

    @primitive
    def unroll_levels(self, depth: int):
        """Compute `depth` consecutive levels per step of the level loop.

        The serial level loop is split by `depth` and its inner part unrolled:
        a step computes a node's level and the next `depth - 1` levels above
        it while the children's states are still in cache.  A guard skips
        levels past the root, so any tree height works.  (This unrolls the
        level loop of the linearized program; it is not CORTEX's recursive
        unrolling, `unroll_recursion`, which computes a node with its children on one thread.)

        Requires: not with per_level_kernels() (its levels are separate launches).

        Parameters
        ----------
        depth : int   levels per step; 1 leaves the loop as it is

        Returns
        -------
        self

        Raises
        ------
        ScheduleError  depth < 1, or per_level_kernels() applied

        Examples
        --------
        Before: ``for l in range(1, L): level(l)``; ``rs.unroll_levels(2)``; after::

            for l_0 in range((L - 1 + 1) // 2):
                for l_1 in T.unroll(2):
                    level(1 + l_0 * 2 + l_1)      # T.where(l_0 * 2 + l_1 < L - 1)
        """
        if depth < 1:
            raise ScheduleError(f"unroll_levels: depth must be a positive int, got {depth!r}")
        if self.plan.per_level:
            raise ScheduleError("unroll_levels: not with per_level_kernels()")
        if self.plan.recursion_depth > 1 and depth > 1:
            raise ScheduleError("unroll_levels: not with unroll_recursion() (it restructures the level loop)")
        if self.persistent_levels and depth > 1:
            raise ScheduleError("unroll_levels: apply it before persistent_threads() (the region spans the level loop)")
        if depth > 1:
            level_loop = self.sch.get_loops(self._block("level"))[0]
            _, inner = self.sch.split(level_loop, [None, depth])
            self.sch.unroll(inner)
        self.unroll_depth = depth
        return self

    @primitive
    def peel(self, block: str):
        """Take the bounds check of a split node loop out of the full tiles.

        After `split(node_loop, [None, f])` on a data-dependent extent n, every
        iteration tests `j_0 * f + j_1 < n`.  `peel` marks that test as likely
        and has TVM's loop partitioning split the loop at build time: a main
        loop over the n // f full tiles with no test, then the last partial
        tile with it.

        Requires: the block has a bounds predicate (from a split).

        Examples
        --------
        Before::

            for j_0, j_1, i in T.grid((n + 3) // 4, 4, 64):
                with T.sblock("child_sum"):
                    T.where(j_0 * 4 + j_1 < n)
                    ...

        ``rs.peel("child_sum")``; after building::

            for j_0, j_1, i in T.grid(n // 4, 4, 64): child_sum[...] = ...          # no test
            for j_0, j_1, i in T.grid((n % 4 + 3) // 4, 4, 64):
                if (j_0 + n // 4) * 4 + j_1 < n: child_sum[...] = ...
        """
        self._block(block)
        func_name = self._function_of(block)
        marked = []

        def on_realize(r):
            if r.block.name_hint == block and not isinstance(r.predicate, tvm.tirx.IntImm):
                marked.append(r)
                return tvm.s_tir.stmt.SBlockRealize(r.iter_values, tirx.likely(r.predicate), r.block)
            return r
        new = tvm_ffi.structural_map(self._functions()[func_name], (tvm.s_tir.stmt.SBlockRealize, on_realize),
                                     order="post")
        if not marked:
            raise ScheduleError(f"peel: {block!r} has no bounds check to peel (split its node loop first)")
        self._replace(**{func_name: new})
        self.plan = replace(self.plan, partition_loops=True)
        return self
