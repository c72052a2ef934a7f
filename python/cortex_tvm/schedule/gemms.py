"""The GEMMs of a scheduled program: which blocks are reductions against a weight (the node's
inputs gathered in the A operand), with the shape a register tile needs (`Gemm`).  The derived
schedule (`derive`), the padding and the program facts of a compile read them; a compile finds
them once (`padding.ProgramFacts`).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import tvm
import tvm_ffi

from .. import level_tails as _tails
from .core import REDUCE
from .core import SPATIAL as _SPATIAL

#: the dtype of a register tile's accumulators where no block says (`Gemm.dtype` does): float32,
#: bf16 weights included (`store_bf16` widens them, `dot_bf16`'s vdpbf16ps sums into float32)
ACCUMULATOR = "float32"


@dataclass(frozen=True)
class Gemm:
    """A reduction block against a weight: out[n, middle..., col] += A[n, k...] * W[.., col-row, k..]."""

    block: str
    weight: str
    #: the weight axis indexed by the output column (the axis `pack` tiles)
    axis: int
    #: 1, or the extent of the middle axis that selects a block of weight rows (an LSTM's gates)
    groups: int
    #: extent of the output column axis
    columns: int
    #: accumulators per node and column vector: the product of the middle extents
    middle: int
    #: the dtype of the block's output, which its register tile accumulates in
    dtype: str = ACCUMULATOR


def expr_vars(expr) -> set:
    found = set()
    tvm_ffi.structural_walk(expr, (tvm.tirx.Var, lambda v: found.add(v)))
    return found


def _row_groups(expr, column, middle_iters):
    """1 when expr is the column var, G when it is g * C + column with g a middle iter of extent G
    (C = the column extent), None otherwise."""
    if expr.same_as(column.var):
        return 1
    if not isinstance(expr, tvm.ir.prim.expr.Add):
        return None
    for scaled, col in ((expr.a, expr.b), (expr.b, expr.a)):
        if col.same_as(column.var) and isinstance(scaled, tvm.ir.prim.expr.Mul):
            for g, c in ((scaled.a, scaled.b), (scaled.b, scaled.a)):
                match = [it for it in middle_iters if g.same_as(it.var)]
                if match and isinstance(c, tvm.tirx.IntImm) and c.value == int(column.dom.extent):
                    return int(match[0].dom.extent)
    return None


def find_gemm(rs, name: str, weights: set):
    """The block's Gemm description, or None when it is not a reduction against one weight."""
    block = rs.sch.get(rs._block(name))
    iters = list(block.iter_vars)
    kinds = [iv.iter_type for iv in iters]
    if REDUCE not in kinds or kinds != sorted(kinds) or kinds.count(_SPATIAL) < 2:
        return None
    spatial = [iv for iv in iters if iv.iter_type == _SPATIAL]
    column, middle = spatial[-1], spatial[1:-1]
    if not isinstance(column.dom.extent, tvm.tirx.IntImm):
        return None
    reduce_vars = {iv.var for iv in iters if iv.iter_type == REDUCE}
    found = []

    def on_load(ld):
        if ld.source.name in weights:
            found.append(ld)
    tvm_ffi.structural_walk(block.body, (tvm.ir.TensorLoad, on_load))

    def axes_of_column(ld):
        return [d for d, e in enumerate(ld.indices) if any(v.same_as(column.var) for v in expr_vars(e))]
    # the B operand is the one weight indexed by the output column; a weight read without
    # it (an embedding row gathered by word) is part of the A operand
    by_column = [ld for ld in found if axes_of_column(ld)]
    if len({ld.source.name for ld in by_column}) != 1 or len(axes_of_column(by_column[0])) != 1:
        return None
    load = by_column[0]
    axis = axes_of_column(load)[0]
    groups = _row_groups(load.indices[axis], column, middle)
    other = [v for d, e in enumerate(load.indices) if d != axis for v in expr_vars(e)]
    if groups is None or any(not any(v.same_as(r) for r in reduce_vars) for v in other):
        return None
    middle_extent = 1
    for iv in middle:
        if not isinstance(iv.dom.extent, tvm.tirx.IntImm):
            return None
        middle_extent *= int(iv.dom.extent)
    return Gemm(name, load.source.name, axis, groups, int(column.dom.extent), middle_extent, out_dtype(block))


def out_dtype(block) -> str:          # the dtype of the buffer a block writes (accumulates in)
    return str(block.writes[0].source.dtype) if block.writes else ACCUMULATOR


def gemms(rs) -> list:
    """Every GEMM block of the scheduled program (the leaf tables' first, when hoisted), leaves first."""
    weights = {name for name, _, _ in rs.signature.model_weights()}
    return [g for g in (find_gemm(rs, name, weights) for name in rs.block_names()) if g is not None]


def with_tail_copies(rs, found) -> list:
    """`gemms(rs)` of a program `_prepare` has changed, from the GEMMs `found` before it: a level
    tail's copy of a GEMM block (`level_tails.tail_name`) is a GEMM of the same shape."""
    by_block = {g.block: g for g in found}
    return [replace(by_block[_tails.copied_from(name)], block=name)
            for name in rs.block_names() if _tails.copied_from(name) in by_block]
