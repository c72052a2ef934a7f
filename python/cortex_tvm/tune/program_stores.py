"""A scheduled kernel's stores, read off its TIR (what `program_features` summarizes).

Run-time sizes become placeholders (`stand_in`: `level_offsets` and the shape variables), so
every loop extent is an expression `evaluate` computes for a batch shape; `stores` lists each
store with its loop nest, the loop variables its index and its reads depend on, and its FLOPs.
"""
from __future__ import annotations

import operator
from dataclasses import dataclass

import tvm
import tvm_ffi
from tvm import tirx

from ..target import bytes_of

#: placeholders for what the batch decides at run time
LEVEL, LEAVES, SLOTS, LEVELS, BATCH, MAX_LEVEL = (tirx.Var(n, "int32") for n in
                                                 ("S_level", "S_leaves", "S_slots", "S_levels", "S_batch", "S_max"))
#: the kernel's symbolic sizes and the placeholder each stands for
SIZE_VARS = {"num_slots": SLOTS, "num_levels_plus_1": LEVELS, "batch": BATCH, "max_level_size": MAX_LEVEL}
#: the linearizer's arrays: they say where a node's operands are, and are no operands themselves
INDEX_BUFFERS = ("children", "word", "level_offsets", "roots", "num_children")

_ARITH = (tirx.Add, tirx.Sub, tirx.Mul, tirx.Div, tirx.Max, tirx.Min)
_EVAL = {tirx.Add: operator.add, tirx.Sub: operator.sub, tirx.Mul: operator.mul,
         tirx.FloorDiv: operator.floordiv, tirx.FloorMod: operator.mod, tirx.Max: max, tirx.Min: min,
         tirx.EQ: lambda a, b: int(a == b)}


@dataclass
class Loop:
    var: tirx.Var
    extent: tirx.PrimExpr
    kind: int                    # tirx.ForKind


@dataclass
class Store:
    """One store of the kernel with the loops around it (outermost first) inside its stage."""
    stage: str                   # "leaves", "level", "roots", "tables"; "root" outside them
    block: str
    loops: list
    index_vars: set              # loop variables the stored index depends on
    reads: list                  # [(buffer name, loop variables its index depends on, element bytes)],
                                 # the linearizer's index arrays left out
    flops: int                   # floating-point operations per execution
    accumulates: bool            # reads the element it writes (a reduction's update)
    element_bytes: int           # bytes of an element of the buffer it writes (its dtype's)


def _vars_of(expr, binding) -> set:
    found = set()
    tvm_ffi.structural_walk(expr, (tvm.ir.Var, found.add))
    out = set()
    for v in found:
        out |= binding.get(v, {v})
    return out


def _flops(value) -> int:
    count = [0]

    def on_arith(e):
        if str(e.ty).startswith(("float", "bfloat")):
            count[0] += 1
    tvm_ffi.structural_walk(value, [(t, on_arith) for t in _ARITH])
    return count[0]


def stand_in(func):
    """The kernel with its run-time sizes as placeholders: `level_offsets[i]` is
    S_leaves + (i - 1) * S_level (0 at i = 0), so a level spans S_level slots and the leaves
    S_leaves; the shape variables are S_slots, S_levels and S_batch."""
    def on_var(v):
        return SIZE_VARS.get(v.name, v)

    def on_load(ld):
        if ld.source.name != "level_offsets":
            return ld
        i = ld.indices[0]
        if isinstance(i, tirx.IntImm) and i.value == 0:
            return tirx.IntImm("int32", 0)
        return LEAVES + (i - 1) * LEVEL
    func = tvm_ffi.structural_map(func, (tvm.ir.TensorLoad, on_load), order="post")
    return tvm_ffi.structural_map(func, (tvm.ir.Var, on_var), order="post")


def evaluate(expr, env: dict) -> int:
    """An integer extent for placeholder values `env`; other variables (loop variables, whose
    differences cancel in a level's span) count as 1."""
    if isinstance(expr, tirx.IntImm):
        return int(expr.value)
    if isinstance(expr, tirx.Var):
        return int(env.get(expr.name, 1))
    if isinstance(expr, tirx.Cast):
        return evaluate(expr.value, env)
    fn = _EVAL.get(type(expr))
    if fn is None:
        raise ValueError(f"program features: cannot evaluate an extent {expr!r}")
    a, b = evaluate(expr.a, env), evaluate(expr.b, env)
    if fn in (operator.floordiv, operator.mod) and b == 0:
        return 0
    return fn(a, b)


def stores(func) -> list:
    """Every non-constant store of the (stood-in) kernel, with its stage and loops."""
    out = []

    def visit(stmt, loops, binding, stage, block):
        if isinstance(stmt, tirx.SeqStmt):
            for s in stmt.seq:
                visit(s, loops, binding, stage, block)
        elif isinstance(stmt, tirx.For):
            loop = Loop(stmt.loop_var, stmt.extent, int(stmt.kind))
            visit(stmt.body, loops + [loop], binding, stage, block)
        elif isinstance(stmt, tvm.s_tir.stmt.SBlockRealize):
            b = stmt.block
            inner = dict(binding)
            for iv, value in zip(b.iter_vars, stmt.iter_values):
                inner[iv.var] = _vars_of(value, binding)
            name = b.name_hint
            new_stage = name if name in ("leaves", "level", "roots", "tables") else stage
            # the level block sits inside the level loop: its stores count per level, so the
            # level loop itself is left out of their nests
            nest = [] if name == "level" else loops
            if b.init is not None:
                visit(b.init, nest, inner, new_stage, name)
            visit(b.body, nest, inner, new_stage, name)
        elif isinstance(stmt, tirx.BufferStore):
            value = stmt.value
            if isinstance(value, (tirx.IntImm, tirx.FloatImm)):
                return
            reads, accumulates = [], False

            def on_load(ld):
                nonlocal accumulates
                buf = ld.source
                if buf.same_as(stmt.buffer):
                    accumulates = True
                    return
                used = set().union(*(_vars_of(i, binding) for i in ld.indices)) if ld.indices else set()
                # index arrays (children, words) address the operands; they are not operands
                if buf.name not in INDEX_BUFFERS:
                    reads.append((buf.name, used, bytes_of(buf.dtype)))
            tvm_ffi.structural_walk(value, (tvm.ir.TensorLoad, on_load))
            index_vars = set().union(*(_vars_of(i, binding) for i in stmt.indices)) if stmt.indices else set()
            out.append(Store(stage or "root", block, loops, index_vars, reads, _flops(value), accumulates,
                             bytes_of(stmt.buffer.dtype)))
        elif isinstance(stmt, tirx.IfThenElse):
            # a level's tail (level_tails): a loop of one trip when its guard holds, none else
            guard = Loop(tirx.Var("guard", "int32"), tirx.Cast("int32", stmt.condition), int(tirx.ForKind.SERIAL))
            visit(stmt.then_case, loops + [guard], binding, stage, block)
        elif hasattr(stmt, "body"):
            visit(stmt.body, loops, binding, stage, block)
        # other statements (evaluate, allocate without a body) hold no stores

    visit(func.body, [], {}, None, None)
    return out
