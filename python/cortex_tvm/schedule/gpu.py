"""GPU primitives: nodes on thread blocks, output units on threads, levels as launches or one
persistent grid-synced kernel.

On a GPU the data-dependent node loop of a level cannot be the grid itself:
its extent `level_offsets[l+1] - level_offsets[l]` lives in device memory,
and the grid size is chosen on the host.  `bind_nodes` therefore gives every
node loop the host-known bound `max_level_size` (a scalar parameter; for the
roots, the batch size) and guards each block with `T.where(j < level size)`.
Then one thread block computes one node of the level: the stage blocks of
the scope are fused under the node loop (`compute_at`), their output loops
are bound to `threadIdx.x`, the per-node scratchpads move to shared memory
and reduction accumulators to registers.

Kernel structure (see kernels.py): after `bind_nodes` on all scopes,
* `per_level_kernels()`: cortex_leaves, cortex_level(level), cortex_roots,
  each one CUDA kernel, launched from the host (one launch per level);
* no kernel primitive (the default): `cortex_main` is a host function whose
  level loop launches the same kernels (the level a kernel argument);
* `single_kernel()` (after bind_nodes): one persistent kernel with a
  fixed grid, a grid-stride loop over each level's nodes and a grid-wide
  barrier (`T.cuda.grid_sync()`, cooperative launch) between levels.
"""
from __future__ import annotations

import tvm
from tvm import tirx

from .. import gpu_rewrites, tir_rewrites
from .core import REDUCE as _REDUCE
from .core import SPATIAL as _SPATIAL
from .core import ScheduleError, primitive
from .kernels import KernelPrimitives
from .layout import MIN_DENSE_ROWS
from .state import State

#: blocks of the persistent grid: one per SM of an H100/H200 (132 SMs)
DEFAULT_GRID = 132


class GpuPrimitives:

    #: scopes whose nodes are bound to GPU thread blocks (bind_nodes)
    bound_scopes = State([])
    #: thread blocks of the persistent grid-synced kernel, None until single_kernel(blocks)
    persistent_blocks = State(None)
    #: kernels.py's single_kernel is replaced by this family's, which calls it for a CPU schedule
    OVERRIDES = ("single_kernel",)

    # ------------------------------------------------------------------ helpers
    def _gpu_bound(self) -> list:
        return list(self.bound_scopes)

    def _scope_blocks(self, scope):
        """Compute blocks of a scope in program order."""
        if scope == "roots":
            return ["roots"]
        return self.block_names(scope)

    def _densify(self, scope):
        """dense_index every scratchpad allocated in the scope that is still indexed by node id."""
        if scope == "roots":
            return
        max_level_size = tir_rewrites.param(self.func, "max_level_size")
        num_slots = tir_rewrites.param(self.func, self.lowered.params[0]).shape[0]
        scope_block = self.sch.get(self._block(scope))
        for buf in scope_block.alloc_buffers:
            first = buf.shape[0]
            if isinstance(first, tvm.ir.Var) and first.same_as(num_slots):
                try:
                    self._rewrite(lambda f, n=buf.name: tir_rewrites.dense_index(f, n, max_level_size, MIN_DENSE_ROWS))
                except ValueError as err:
                    raise ScheduleError(f"bind_nodes: scratchpad {buf.name!r}: {err}") from err

    def _writes_alloc(self, block, scope):
        """Index of the write buffer of `block` that is a scratchpad of `scope`, or None."""
        if scope == "roots":
            return None
        allocs = {b.name for b in self.sch.get(self._block(scope)).alloc_buffers}
        for i, region in enumerate(self.sch.get(self._block(block)).writes):
            if region.source.name in allocs:
                return i
        return None

    # ------------------------------------------------------------------ primitives
    @primitive
    def bind_nodes(self, scope: str, threads: int = 0, local_accumulators: bool = True):
        """Map one scope's nodes to CUDA thread blocks and its output units to threads.

        The node loops of `scope` ("leaves", "level", "roots", or "tables": the
        parameter transform's leaf computation over the vocabulary, whose node
        loop is already the constant vocabulary size) get the
        host-known extent `max_level_size` (roots: the batch size) with the
        guard `T.where(j < level size)`; the scope's blocks are fused under the
        node loop of its last block (compute_at, producers first), that loop
        is bound to `blockIdx.x`, every block's output loop is split by
        `threads` and bound to `threadIdx.x`, scratchpads become one row per
        node in shared memory, and reductions accumulate in registers
        (cache_write "local") with their init split off.

        Requires: a CUDA target at build time; the scope not bound yet;
        every scratchpad of the scope accessed as `t[level_offsets[l] + j, ...]`
        or already dense (`dense_index` is applied where needed).

        Parameters
        ----------
        scope : str      "leaves", "level" or "roots"
        threads : int    threads per block (0: the output extent of the scope's
                         last block, e.g. the hidden size, capped at 1024)
        local_accumulators : bool   accumulate reductions in registers

        Returns
        -------
        self

        Raises
        ------
        ScheduleError  unknown or already bound scope, a bad thread count, or
                       a block whose loops do not have the (node, outputs, reduce...) form

        Examples
        --------
        Before::

            for v in range(num_levels_plus_1 - 2):
                with T.sblock("level"):
                    for i0, i1, k in T.grid(level_offsets[v_1 + 1] - level_offsets[v_1], 64, 64):
                        with T.sblock("internal_h_sum"): ...   # += W[v_i1, v_k] * child_sum[v_i0, v_k]
                    for i0, i1 in T.grid(level_offsets[v_1 + 1] - level_offsets[v_1], 64):
                        with T.sblock("internal_h"): ...

        ``rs.bind_nodes("level", threads=64)``; after::

            for v in range(num_levels_plus_1 - 2):
                with T.sblock("level"):
                    internal_h_sum = T.sblock_alloc_buffer(..., scope="shared")
                    for i0 in T.thread_binding(max_level_size, thread="blockIdx.x"):
                        for ax1 in T.thread_binding(64, thread="threadIdx.x"):
                            ... internal_h_sum_local accumulates over k; T.where(i0 < level size)
                        for i1 in T.thread_binding(64, thread="threadIdx.x"):
                            with T.sblock("internal_h"):
                                T.where(i0 < level_offsets[v_1 + 1] - level_offsets[v_1]) ...
        """
        if scope not in ("tables", "leaves", "level", "roots"):
            raise ScheduleError(f"bind_nodes: scope must be 'tables', 'leaves', 'level' or 'roots', got {scope!r}")
        if scope in self._gpu_bound():
            raise ScheduleError(f"bind_nodes: {scope!r} is already bound")
        if self.persistent_levels:
            raise ScheduleError("bind_nodes: not with persistent_threads(), a CPU primitive")
        if not 0 <= threads <= 1024:
            raise ScheduleError(f"bind_nodes: threads must be an int in [0, 1024] (0: automatic), got {threads!r}")
        if scope != "roots" and not self.has_block(scope):
            raise ScheduleError(f"bind_nodes: no scope {scope!r} (leaves exist only after specialize_leaves, "
                                "tables only after hoist)")
        self._densify(scope)
        if scope not in ("roots", "tables"):        # the tables' node loop is the vocabulary: a constant
            bound = tir_rewrites.param(self.func, "max_level_size")
            new, count = gpu_rewrites.bound_node_loops(self.func, scope, bound)
            if not count:
                raise ScheduleError(f"bind_nodes: no data-dependent node loop in {scope!r} "
                                    "(was it transformed already?)")
            self._replace(**{self.func_name: new})
        blocks = self._scope_blocks(scope)
        sch = self.sch
        # fuse the scope's blocks under one node loop: every node loop now has the extent
        # max_level_size, and row j of a block reads only row j of the blocks before it
        # (plus earlier levels), so the sibling loops merge (compute_at cannot move a
        # state's writer, an output block; reverse_compute_at cannot follow reads of a
        # constant range such as gates[j, 0:5, i])
        loops = [sch.get_loops(self._block(name))[0] for name in blocks]
        separate = []
        if len(loops) > 1:
            try:
                node = sch.merge(*loops)
            except Exception:  # noqa: BLE001 - different extents: one kernel loop per block
                node, separate = loops[0], blocks[1:]
        else:
            node = loops[0]
        outer = 0
        sch.bind(node, "blockIdx.x")
        for name in separate:
            own = sch.get_loops(self._block(name))[outer]
            sch.bind(own, "blockIdx.x")
        if threads == 0:
            extent = sch.get(sch.get_loops(self._block(blocks[-1]))[-1]).extent
            threads = min(int(extent), 1024) if isinstance(extent, tirx.IntImm) else 64
        for name in blocks:
            self._bind_threads(name, scope, threads, local_accumulators)
        self.bound_scopes.append(scope)
        return self

    def _bind_threads(self, name, scope, threads, local_accumulators):
        """Below the node loop: output loops -> threadIdx.x, scratchpad -> shared, accumulator -> local."""
        sch = self.sch
        b = self._block(name)
        block = sch.get(b)
        loops = sch.get_loops(b)
        # the loop bound to blockIdx.x, then this block's own loops
        bound_at = [i for i, l in enumerate(loops) if sch.get(l).kind == tirx.ForKind.THREAD_BINDING]
        if not bound_at:
            raise ScheduleError(f"bind_nodes: {name!r} is not under the node loop")
        inner = loops[bound_at[-1] + 1:]
        kinds = [iv.iter_type for iv in block.iter_vars]
        n_reduce = sum(1 for k in kinds if k == _REDUCE)
        spatial_loops = inner[:len(inner) - n_reduce]
        # drop the unit node loop compute_at left (ax0 of extent 1)
        spatial_loops = [l for l in spatial_loops
                         if not (isinstance(sch.get(l).extent, tirx.IntImm) and sch.get(l).extent.value == 1)]
        if not spatial_loops:
            raise ScheduleError(f"bind_nodes: {name!r} has no output loop to put on threads")
        out = sch.fuse(*spatial_loops) if len(spatial_loops) > 1 else spatial_loops[0]
        extent = sch.get(out).extent
        if isinstance(extent, tirx.IntImm) and extent.value <= threads:
            sch.bind(out, "threadIdx.x")
            thread_loop, rest = out, None
        else:
            rest, thread_loop = sch.split(out, [None, threads])
            sch.reorder(thread_loop, rest)
            sch.bind(thread_loop, "threadIdx.x")
        alloc = self._writes_alloc(name, scope)
        if alloc is not None:
            sch.set_scope(b, alloc, "shared")
        if n_reduce:
            if local_accumulators:
                cw = sch.cache_write(b, 0, "local")
                sch.reverse_compute_at(cw, rest if rest is not None else thread_loop)
            b = self._block(name)
            sch.decompose_reduction(b, sch.get_loops(b)[-n_reduce])

    @primitive
    def bind_packs(self, threads: int = 256):
        """Map each weight layout of the parameter transforms (`pack`) onto the GPU: its
        elements spread over thread blocks of `threads` threads.

        Examples
        --------
        Before (in ``cortex_transform_params``)::

            for a, c, b in T.grid(4, 256, 64):
                with T.sblock("pack_U"): U_packed[a, c, b] = U[a * 64 + b, c]

        ``rs.bind_packs(256)``; after::

            for f_0 in T.thread_binding(256, thread="blockIdx.x"):
                for f_1 in T.thread_binding(256, thread="threadIdx.x"):
                    with T.sblock("pack_U"): ...      # a, c, b from f_0 * 256 + f_1
        """
        if not 1 <= threads <= 1024:
            raise ScheduleError(f"bind_packs: threads must be an int in [1, 1024], got {threads!r}")
        names = [tir_rewrites.pack_block(name) for name, *_ in self.plan.packs]
        if not names:
            raise ScheduleError("bind_packs: no weight is packed")
        for name in names:
            loops = self.sch.get_loops(self._block(name))
            if any(self.sch.get(l).kind == tirx.ForKind.THREAD_BINDING for l in loops):
                raise ScheduleError(f"bind_packs: {name!r} is already bound")
            fused = self.sch.fuse(*loops) if len(loops) > 1 else loops[0]
            grid, block = self.sch.split(fused, [None, threads])
            self.sch.bind(grid, "blockIdx.x")
            self.sch.bind(block, "threadIdx.x")
        return self

    @primitive
    def single_kernel(self, blocks: int = DEFAULT_GRID):
        """One kernel for the whole inference; on GPU a persistent, grid-synced kernel.

        This replaces kernels.py's `KernelPrimitives.single_kernel` in RecSchedule (it is listed
        in `GpuPrimitives.OVERRIDES`).  CPU (no scope bound with bind_nodes): that one, the
        default structure.
        GPU (after bind_nodes on every scope): the root body runs in one grid of
        `blocks` thread blocks; each level's node loop becomes a grid-stride
        loop and `T.cuda.grid_sync()` (a cooperative-groups grid barrier)
        separates the leaves, each level and the roots.  The function gets the
        attribute `tirx.kernel_launch_params = ["blockIdx.x", "threadIdx.x",
        "tirx.use_cooperative_launch"]`, so the CUDA runtime launches it with
        cuLaunchKernelEx's cooperative attribute: every block must be
        resident at once, hence a fixed grid no larger than the GPU can hold.

        Requires (GPU): "leaves" (if present), "level" and "roots" bound with
        bind_nodes; not with per_level_kernels().

        Parameters
        ----------
        blocks : int   grid size of the persistent kernel (GPU only; default 132, one per H200 SM)

        Returns
        -------
        self

        Raises
        ------
        ScheduleError  GPU form with a scope left unbound, with per_level_kernels, or a bad grid size

        Examples
        --------
        Before (after bind_nodes)::

            for i0 in T.thread_binding(max_level_size, thread="blockIdx.x"): leaves ...
            for v in range(num_levels_plus_1 - 2):
                for i0 in T.thread_binding(max_level_size, thread="blockIdx.x"): level ...

        ``rs.single_kernel(blocks=132)``; after::

            for bx in T.thread_binding(132, thread="blockIdx.x"):
                for i0_o in range((max_level_size + 131) // 132): leaves (i0 = i0_o * 132 + bx) ...
                T.cuda.grid_sync()
                for v in range(num_levels_plus_1 - 2):
                    for i0_o in range((max_level_size + 131) // 132): level ...
                    T.cuda.grid_sync()
                for i0_o in range((batch + 131) // 132): roots ...
        """
        bound = self._gpu_bound()
        if not bound:
            return KernelPrimitives.single_kernel(self)
        if blocks < 1:
            raise ScheduleError(f"single_kernel: blocks must be a positive int, got {blocks!r}")
        if self.plan.per_level:
            raise ScheduleError("single_kernel: per_level_kernels() was applied")
        needed = [s for s in ("leaves", "level", "roots") if s == "roots" or self.has_block(s)]
        missing = [s for s in needed if s not in bound]
        if missing:
            raise ScheduleError(f"single_kernel: bind_nodes first for {missing} (one persistent kernel "
                                "needs every stage on the GPU)")
        if self.persistent_blocks is not None:
            raise ScheduleError("single_kernel: already a persistent kernel")
        self.finalize()
        self._replace(**{self.func_name: gpu_rewrites.persistent_kernel(self.func, blocks)})
        self.persistent_blocks = blocks
        return self
