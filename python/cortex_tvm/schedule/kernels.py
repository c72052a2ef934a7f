"""Kernel-structure primitives: one kernel for the whole inference, or one per level; on the
CPU, one parallel region for all levels (persistent threads) or a fork and join per stage."""
from __future__ import annotations

from dataclasses import replace

import tvm
import tvm_ffi
from tvm import tirx

from .. import level_tails as _tails
from .. import tir_rewrites
from .core import ScheduleError, primitive
from .state import State

from ..plan import LEAVES_FUNC, LEVEL_FUNC, ROOTS_FUNC
#: the loop annotations TVM's LLVM codegen reads (codegen_cpu.cc): the loop becomes one parallel
#: launch whose parallel loops inside are split among its threads, and a stage ends in a barrier
LAUNCH_POINT, BARRIER = "pragma_parallel_launch_point", "pragma_parallel_barrier_when_finish"


class KernelPrimitives:

    #: the level loop runs as one parallel region of the CPU threads (persistent_threads)
    persistent_levels = State(False)

    @primitive
    def single_kernel(self):
        """One kernel runs the whole inference, levels included (the default).

        The CPU form: RecSchedule's `single_kernel` is gpu.py's (`GpuPrimitives.OVERRIDES`), which
        builds the persistent GPU kernel after `bind_nodes` and calls this one otherwise.

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
        if self.plan.recursion_depth > 1:
            raise ScheduleError("persistent_threads: not with unroll_recursion() (its steps are the parallel "
                                "regions)")
        if self.bound_scopes or self.persistent_blocks is not None:
            raise ScheduleError("persistent_threads: a CPU primitive; this schedule binds GPU threads "
                                "(the GPU's own is single_kernel(blocks))")
        if self.tail_tile > 1:
            # the tails' blocks open only when the schedule is finalized (level_tails); check
            # now that the region can be made, and make it then
            persistent_region(_tails.join_tails(self.func))
        else:
            self._rewrite(persistent_region)
        self.persistent_levels = True
        return self


    @primitive
    def unroll_recursion(self, depth: int, chunks: int = 2):
        """CORTEX's recursive unrolling: a node is computed in one step with its descendants
        `depth` levels down, on the thread that computes the node.

        The linearizer groups every node whose depth below its root is a
        multiple of `depth` (a *top*) with its descendants above the next
        tops, and lays each step out as `chunks` runs of whole groups, each
        run as `depth` levels (phases), the top last (`unrolled_levels`).
        The level loop becomes steps of a parallel loop over the chunks, each
        walking its phases in order: a node's children inside its group were
        computed just before, by the same thread, so they are read from its
        own cache, and there is no barrier between a node and its children,
        only a join per step (instead of one per level and stage).  The
        price: each thread multiplies its own nodes by every column of the
        weights, so it streams all of a weight, not its share.

        Trees and sequences unroll; a DAG (a node with several parents) is
        refused by the linearizer, as it belongs to no single group.

        Requires: leaves specialized; a single CPU kernel without persistent_threads,
        unroll_levels or per_level_kernels, and no parallel loop inside a
        level (the chunks are the parallelism: not with parallel_columns or
        parallel_nodes).

        Parameters
        ----------
        depth : int    levels computed per step (2: a node with its children)
        chunks : int   runs of groups per step, run in parallel (the cores)

        Returns
        -------
        self

        Raises
        ------
        ScheduleError  depth or chunks < 1, an incompatible primitive, a parallel stage

        Examples
        --------
        Before::

            for l in range(num_levels_plus_1 - 2):
                with T.sblock("level"):
                    vl = T.axis.opaque(num_levels_plus_1, l + 1)
                    ...                                  # the level's nodes

        ``rs.unroll_recursion(2, chunks=2)``; after::

            for step in range((num_levels_plus_1 - 2) // 4):
                for chunk in T.parallel(2):
                    for phase in range(2):               # the children, then their parents
                        with T.sblock("level"):
                            vl = T.axis.opaque(num_levels_plus_1, (step * 2 + chunk) * 2 + phase + 1)
                            ...
        """
        for name, value in (("depth", depth), ("chunks", chunks)):      # (@primitive checked the type)
            if value < 1:
                raise ScheduleError(f"unroll_recursion: {name} must be a positive int, got {value!r}")
        if self.plan.per_level:
            raise ScheduleError("unroll_recursion: not with per_level_kernels() (a step spans levels)")
        if self.persistent_levels or self.unroll_depth > 1:
            raise ScheduleError("unroll_recursion: not with persistent_threads() or unroll_levels(); it "
                                "restructures the level loop itself")
        if self.bound_scopes or self.persistent_blocks is not None:
            raise ScheduleError("unroll_recursion: a CPU primitive; this schedule binds GPU threads")
        if self.plan.recursion_depth > 1:
            raise ScheduleError("unroll_recursion: applied already")
        if not self.lowered.specialized:
            raise ScheduleError("unroll_recursion: apply specialize_leaves() first (the leaves are level 0, "
                                "computed before the steps)")
        if depth == 1:
            return self
        self._rewrite(lambda f: unrolled_region(f, depth, chunks))
        self.plan = replace(self.plan, recursion_depth=depth, recursion_chunks=chunks)
        return self


def unrolled_region(func, depth: int, chunks: int):
    """The level loop as steps x parallel chunks x phases (see `unroll_recursion`)."""
    root = func.body.block
    parts = list(root.body.seq) if isinstance(root.body, tirx.SeqStmt) else [root.body]
    level_loops = [p for p in parts if isinstance(p, tirx.For) and _first_block_name(p.body) == "level"]
    if len(level_loops) != 1 or not isinstance(level_loops[0].body, tvm.s_tir.stmt.SBlockRealize):
        raise ScheduleError("unroll_recursion: the level loop was transformed; apply it to the level loop "
                            "as lowered")
    loop = level_loops[0]
    parallel = []
    tvm_ffi.structural_walk(loop.body, (tirx.For, lambda f: parallel.append(f) if f.kind == tirx.ForKind.PARALLEL
                                        else None))
    if parallel:
        raise ScheduleError("unroll_recursion: a stage of the level already runs in parallel "
                            f"(loop {parallel[0].loop_var.name}); the chunks of a step are the parallel loop")
    step, chunk, phase = (tirx.Var(name, "int32") for name in ("step", "chunk", "phase"))
    level = (step * chunks + chunk) * depth + phase
    body = tvm_ffi.structural_map(loop.body, (tvm.ir.Var, lambda v: level if v.same_as(loop.loop_var) else v),
                                  order="post")
    nest = tirx.For(phase, 0, depth, tirx.ForKind.SERIAL, body)
    nest = tirx.For(chunk, 0, chunks, tirx.ForKind.PARALLEL, nest)
    nest = tirx.For(step, 0, tirx.floordiv(loop.extent, depth * chunks), tirx.ForKind.SERIAL, nest)
    parts = [nest if p.same_as(loop) else p for p in parts]
    new_root = _with_block(root, body=tirx.SeqStmt(parts) if len(parts) > 1 else parts[0])
    return func.with_body(tvm.s_tir.stmt.SBlockRealize(func.body.iter_values, func.body.predicate, new_root))


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
                            writes=list(level.writes) + [tir_rewrites.whole_region(b) for b in shared])

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
    """A stage of a level as a parallel loop ending in a barrier (under its test, for a tail's
    stage that level_tails guards: the test reads only the level, so every thread takes it)."""
    if isinstance(stage, tirx.IfThenElse) and stage.else_case is None and isinstance(stage.then_case, tirx.For):
        return tirx.IfThenElse(stage.condition, _parallel_stage(stage.then_case), None)
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
