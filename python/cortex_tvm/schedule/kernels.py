"""Kernel-structure primitives: one kernel for the whole inference, or one per level."""
from __future__ import annotations

from dataclasses import replace

import tvm
import tvm_ffi
from tvm import tirx

from .core import ScheduleError, primitive

LEAVES_FUNC, LEVEL_FUNC, ROOTS_FUNC = "cortex_leaves", "cortex_level", "cortex_roots"


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
        self.plan = replace(self.plan, per_level=True)
        return self


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
