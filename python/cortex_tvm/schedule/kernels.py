"""Kernel-structure primitives: one kernel for the whole inference, or one per level; on the
CPU, one parallel region for all levels (persistent threads) or a fork and join per stage."""
from __future__ import annotations

from dataclasses import replace

import tvm
import tvm_ffi
from tvm import tirx

from .core import ScheduleError, primitive

from ..plan import LEAVES_FUNC, LEVEL_FUNC, ROOTS_FUNC
#: the loop annotations TVM's LLVM codegen reads (codegen_cpu.cc): the loop becomes one parallel
#: launch whose parallel loops inside are split among its threads, and a stage ends in a barrier
LAUNCH_POINT, BARRIER = "pragma_parallel_launch_point", "pragma_parallel_barrier_when_finish"


class KernelPrimitives:

    @primitive
    def single_kernel(self):
        """One kernel runs the whole inference, levels included (the default).

        Examples
        --------
        ``rs.single_kernel()`` keeps ``cortex_main``: leaves, ``for l in range(1, L): level``, roots.
        """
        self.plan = replace(self.plan, per_level=False)
        return self

    @primitive
    def per_level_kernels(self):
        """One kernel call per level, driven from the host; leaves and roots are kernels of their own.

        Examples
        --------
        Before: one function ``cortex_main`` with the level loop inside.
        ``rs.per_level_kernels()``; the build then has ``cortex_leaves``,
        ``cortex_level(..., level)`` (the level loop's body, the level a
        parameter) and ``cortex_roots``; the executor calls ``cortex_level``
        once per level.
        """
        if self.unroll_depth > 1:
            raise ScheduleError("per_level_kernels: not with unroll_levels(depth > 1)")
        if self.persistent_levels:
            raise ScheduleError("per_level_kernels: not with persistent_threads() (its threads span the levels)")
        self.plan = replace(self.plan, per_level=True)
        return self

    @primitive
    def persistent_threads(self):
        """Fork the CPU threads once for the whole level loop; a barrier ends each stage of a level.

        Without it every parallel stage of every level is a fork and a join of
        TVM's thread pool.  With it the level loop runs inside one parallel
        region: each thread walks all the levels, takes its static share of
        every stage's parallel loop (the same column tiles at every level, so
        its slice of the weights stays in its own cache) and waits at a
        barrier (`TVMBackendParallelBarrier`) after each stage.  Stages that
        were serial (a child sum, an elementwise step) must not run on every
        thread, so their outer loop, whose iterations are independent, becomes
        parallel too; scratchpads that several stages of a level share move
        out of the region (one copy, not one per thread).  Measured on a
        2-core Zen 3: a fork and join costs 1.2-1.4 us, a barrier 0.5-0.6 us.

        Requires: a single kernel on a CPU (not per_level_kernels, not a GPU
        binding), and every stage of a level a loop whose iterations are
        independent, at least one already parallel (parallel_columns).
        Re-applied when the schedule is finalized, so stages scheduled later
        get their barrier too.

        Returns
        -------
        self

        Raises
        ------
        ScheduleError  per-level kernels, a GPU binding, no parallel stage, or a stage whose
                       outer loop carries a reduction

        Examples
        --------
        Before (TreeFC H=64 after ``parallel_columns("W")``, n = the level's nodes)::

            for v in range(num_levels_plus_1 - 2):
                with T.sblock("level"):
                    child_sum = T.sblock_alloc_buffer((num_slots, 64))
                    for i0 in range(n): ...                       # child_sum, serial
                    for i1_0_m in T.parallel(4): ...              # the GEMM tiles: a fork and a join

        ``rs.persistent_threads()``; after::

            child_sum = T.sblock_alloc_buffer((num_slots, 64))   # in the root block
            for v in T.serial(num_levels_plus_1 - 2, annotations={"pragma_parallel_launch_point": 1}):
                with T.sblock("level"):
                    for i0 in T.parallel(n, annotations={"pragma_parallel_barrier_when_finish": 1}): ...
                    for i1_0_m in T.parallel(4, annotations={"pragma_parallel_barrier_when_finish": 1}): ...
        """
        if self.plan.per_level:
            raise ScheduleError("persistent_threads: not with per_level_kernels() (each level is its own call)")
        if self.bound_scopes or self.persistent_blocks is not None:
            raise ScheduleError("persistent_threads: a CPU primitive; this schedule binds GPU threads "
                                "(the GPU's own is single_kernel(blocks))")
        self._rewrite(persistent_region)
        self.persistent_levels = True
        return self


def persistent_region(func):
    """The level loop as one parallel region (see `persistent_threads`); idempotent."""
    root = func.body.block
    parts = list(root.body.seq) if isinstance(root.body, tirx.SeqStmt) else [root.body]
    level_loops = [p for p in parts if isinstance(p, tirx.For) and _first_block_name(p.body) == "level"]
    if len(level_loops) != 1:
        raise ScheduleError("the level loop was transformed; cannot make it one parallel region")
    level = _find_block(level_loops[0], "level")
    stages = list(level.body.seq) if isinstance(level.body, tirx.SeqStmt) else [level.body]
    if not any(isinstance(s, tirx.For) and s.kind == tirx.ForKind.PARALLEL for s in stages):
        raise ScheduleError("no stage of a level runs in parallel (apply parallel_columns first)")
    new_stages = [_parallel_stage(s) for s in stages]
    shared = _shared_scratchpads(level, stages)
    new_level = _with_block(level, body=tirx.SeqStmt(new_stages) if len(new_stages) > 1 else new_stages[0],
                            alloc_buffers=[b for b in level.alloc_buffers if not any(b.same_as(x) for x in shared)],
                            # written by the level: TVM then allocates them above the level loop
                            writes=list(level.writes) + [_whole(b) for b in shared])

    def on_block(b):
        return new_level if b.same_as(level) else b
    loop = tvm_ffi.structural_map(level_loops[0], (tvm.s_tir.stmt.SBlock, on_block), order="post")
    loop = tvm_ffi.structural_map(loop, (tirx.For, lambda f: _annotated(f, drop=LAUNCH_POINT)), order="post")
    loop = _annotated(loop, **{LAUNCH_POINT: 1})
    parts = [loop if p.same_as(level_loops[0]) else p for p in parts]
    new_root = _with_block(root, body=tirx.SeqStmt(parts) if len(parts) > 1 else parts[0],
                           alloc_buffers=list(root.alloc_buffers) + shared)
    return func.with_body(tvm.s_tir.stmt.SBlockRealize(func.body.iter_values, func.body.predicate, new_root))


def _parallel_stage(stage):
    """A stage of a level as a parallel loop ending in a barrier."""
    if not isinstance(stage, tirx.For):
        raise ScheduleError(f"a stage of a level is a {type(stage).__name__}, not a loop; it cannot be "
                            "shared among the threads")
    if stage.kind != tirx.ForKind.PARALLEL:
        carried = _reduction_over(stage)
        if carried:
            raise ScheduleError(f"stage {carried!r} reduces over its outer loop; its iterations are not "
                                "independent, so the threads cannot share it")
        if stage.kind != tirx.ForKind.SERIAL:
            raise ScheduleError(f"a stage's outer loop is {stage.kind}, not serial or parallel")
    return _annotated(stage, kind=tirx.ForKind.PARALLEL, **{BARRIER: 1})


def _reduction_over(loop):
    """The name of a block under `loop` binding the loop variable to a non-spatial iterator, or None."""
    found = []

    def on_realize(r):
        for iv, value in zip(r.block.iter_vars, r.iter_values):
            uses = []
            tvm_ffi.structural_walk(value, (tirx.Var, lambda v: uses.append(v) if v.same_as(loop.loop_var) else None))
            if uses and iv.iter_type != 0:        # 0: data-parallel
                found.append(r.block.name_hint)
    tvm_ffi.structural_walk(loop.body, (tvm.s_tir.stmt.SBlockRealize, on_realize))
    return found[0] if found else None


def _shared_scratchpads(level, stages):
    """The level's own buffers that more than one stage touches (one copy for all threads)."""
    def touched(stage):
        names = set()
        tvm_ffi.structural_walk(stage, (tvm.s_tir.stmt.SBlock, lambda b: names.update(
            r.source.name for r in list(b.reads) + list(b.writes))))
        return names
    per_stage = [touched(s) for s in stages]
    return [b for b in level.alloc_buffers if sum(b.name in t for t in per_stage) > 1]


def _whole(buffer):
    return tirx.BufferRegion(buffer, [tvm.ir.Range.from_min_extent(0, d) for d in buffer.shape])


def _annotated(loop, kind=None, drop=None, **annotations):
    if drop is not None and drop not in loop.annotations:
        return loop
    merged = {k: v for k, v in loop.annotations.items() if k != drop}
    merged.update(annotations)
    return tirx.For(loop.loop_var, loop.min, loop.extent, loop.kind if kind is None else kind, loop.body,
                    loop.thread_binding, merged)


def _with_block(block, body=None, alloc_buffers=None, writes=None):
    return tvm.s_tir.stmt.SBlock(block.iter_vars, block.reads, block.writes if writes is None else writes,
                                 block.name_hint, block.body if body is None else body, block.init,
                                 block.alloc_buffers if alloc_buffers is None else alloc_buffers,
                                 block.match_buffers, block.annotations)


def _find_block(stmt, name):
    found = []
    tvm_ffi.structural_walk(stmt, (tvm.s_tir.stmt.SBlock, lambda b: found.append(b) if b.name_hint == name else None))
    return found[0]


def split_per_level(func, first_level: int) -> tvm.IRModule:
    """cortex_main -> cortex_leaves, cortex_level(level), cortex_roots (same parameters + level).

    The level loop counts from 0 and its body computes level `loop var + first_level`;
    cortex_level takes the level itself.
    """
    root = func.body.block
    parts = list(root.body.seq) if isinstance(root.body, tirx.SeqStmt) else [root.body]
    level_loops = [p for p in parts if isinstance(p, tirx.For)
                   and _first_block_name(p.body) == "level"]
    if len(level_loops) != 1:
        raise ScheduleError("per_level_kernels: the level loop was transformed; cannot split it")
    loop = level_loops[0]
    level = tirx.Var("level", "int32")
    counter = level - first_level
    level_body = tvm_ffi.structural_map(loop.body, (tvm.ir.Var, lambda v: counter if v.same_as(loop.loop_var) else v),
                                        order="post")

    def make(name, body, extra=()):
        block = tvm.s_tir.stmt.SBlock([], [], [], "root", body, None, root.alloc_buffers, [], {})
        realize = tvm.s_tir.stmt.SBlockRealize([], True, block)
        f = tirx.PrimFunc(list(func.params) + list(extra), realize, attrs=func.attrs)
        return f.with_attr("global_symbol", name)

    before = [p for p in parts[:parts.index(loop)]]
    after = [p for p in parts[parts.index(loop) + 1:]]
    funcs = {LEVEL_FUNC: make(LEVEL_FUNC, level_body, [level])}
    funcs[LEAVES_FUNC] = make(LEAVES_FUNC, _seq(before))
    funcs[ROOTS_FUNC] = make(ROOTS_FUNC, _seq(after))
    return tvm.IRModule(funcs)


def _seq(stmts):
    if not stmts:
        return tirx.Evaluate(0)
    return stmts[0] if len(stmts) == 1 else tirx.SeqStmt(stmts)


def _first_block_name(stmt):
    found = []
    tvm_ffi.structural_walk(stmt, (tvm.s_tir.stmt.SBlock, lambda b: found.append(b.name_hint)), order="pre")
    return found[0] if found else None
