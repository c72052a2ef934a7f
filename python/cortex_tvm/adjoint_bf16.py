"""bfloat16 products in the level pass's contractions (`adjoint_nest.emit_nest`), on AVX512_BF16's
`vdpbf16ps`: 16 float32 sums, each adding the dot product of a bfloat16 pair of one operand with
the pair of the other (`dot_bf16`).

A contraction nest of the form ``sum_{.., s} w[.., s, ..] * x[node, .., s]`` whose vector runs
along the weight (TreeLSTM's ``gates_sum[n, g, i] = sum_{j,k} U[g*H + i, j*H + k] * h[child_j, k]``
in the forward, ``d_h[child_j, k] += sum_{g,i} d_gates_sum[n, g, i] * U[g*H + i, j*H + k]`` in
the backward) is taken in pairs of its last summed axis s:

* the weight is read from its copy (`adjoint_copies.Transposed` / `Widened`) written as pairs,
  word [p, s // 2, lane] holding the bfloat16 values at s and s + 1 (rounded to nearest even);
* the node operand x is rounded once per node of the run, into a scratch array, before the nest
  (a node's pair is then read by every chunk of columns, not rounded by each);
* each step of the sum over s // 2 adds, for each node of the register tile and each 16-lane
  vector of its columns, the weight's pair vector . the node's pair broadcast to every lane.

The sums stay float32; what changes is the products' inputs, rounded to bfloat16 (8 significant
bits), as PyTorch's bfloat16 autocast rounds a matmul's inputs.  A nest of another form is left
to float32 (`plan` returns None), reading a pair copy's values widened.  The weight gradients'
packed nest (`adjoint_packed.emit_packed`) takes pairs along the nodes.

TreeLSTM h = 16, a whole tile of 8 nodes of an internal level in the forward, schematic (names
made up; `func.script()` prints the scratch as an unnamed buffer and the rounding as its integer
arithmetic); before (float32, U_T the transpose of U in panels of 16 lanes)::

    for v_15, v_16 in T.grid(2, 16):                       # j, k
        for v_17 in T.unroll(8):                           # the tile's nodes
            for v_18 in T.vectorized(16):
                acc[v_17, v_18] = acc[v_17, v_18] + U_T[g, v_15 * 16 + v_16, v_18] * h[children[n_17, v_15], v_16]

after (U_T's words hold pairs along k; x_pairs: each node's h rounded before the nest, each value's
bfloat16 bits at k in a uint16 array, read as uint32 pairs through a view of it)::

    x_halves = T.alloc_buffer((nodes, 2, 16), "uint16")
    x_pairs = x_halves.view("uint32")                      # (nodes, 2, 8): [.., kp] = k 2 kp and 2 kp + 1
    for n, j in T.grid(nodes, 2):
        for k in T.vectorized(16):
            x_halves[n, j, k] = T.Cast("uint16", bf16_bits(h[children[n, j], k]))
    ...
    for v_15, v_16 in T.grid(2, 8):                        # j, k // 2
        for v_17 in T.unroll(8):
            acc[v_17, 0:16] = T.call_extern("float32x16", "cortex_dpbf16ps", acc[v_17, T.Ramp(0, 1, 16)],
                                            T.Broadcast(T.reinterpret("int32", x_pairs[n_17, v_15, v_16]), 16),
                                            T.reinterpret("int32x16", U_T[g, v_15 * 8 + v_16, T.Ramp(0, 1, 16)]))
"""
from __future__ import annotations

from dataclasses import dataclass

import tvm
import tvm.sym
from tvm import tirx
from tvm.script.ir_builder import tirx as Tb

from .dot_bf16 import IMPORT_ATTR, LANES, LLVM_IR, PAIR_STORAGE, dot_pairs
from .tir_rewrites import BF16_STORAGE as BF16_HALF, bf16_bits32
from .tir_builder import axes_grid, substitute, uses, values_of, vector_loop


@dataclass
class Plan:
    """How one contraction nest runs on pairs: the weight's read (`weight`, over the block's
    axes) and its pair copy (`copy`, `layout`), the node operand (`operand`), the summed axis
    taken in pairs (`axis`, `extent`) and the other summed axes (`others`)."""
    weight: object
    copy: object
    layout: object
    operand: object
    axis: object
    extent: int
    others: list
    inner: object


def takes_pairs(emitter) -> bool:
    """Whether `emitter`'s (`StageEmitter`) contractions may take pairs: bf16 asked for, and
    vectors of LANES float32 lanes (AVX-512's, as `vdpbf16ps` has)."""
    return emitter.bf16 and emitter.lanes == LANES


def plan(emitter, coeff, bufs, inner, summed, outer):
    """The `Plan` of the nest that sums `coeff` over `summed` with its vector along `inner`
    (var, extent), or None where it does not have the form above: no bf16, no vector axis, an
    odd last summed extent, a summand that is not (weight read) x (an operand free of the vector
    and of the outer axes), or a weight with no pair copy whose words hold pairs along s."""
    if not takes_pairs(emitter) or inner is None or not summed:
        return None
    axis, extent = summed[-1]
    if not isinstance(extent, tirx.IntImm) or int(extent) % 2 or not isinstance(coeff, tirx.Mul):
        return None
    var = inner[0]
    for weight, operand in ((coeff.a, coeff.b), (coeff.b, coeff.a)):
        if not isinstance(weight, tvm.ir.TensorLoad) or len(weight.indices) != 2 or emitter.reads_node(weight) \
                or uses(operand, var) or any(uses(operand, v) for v, _ in outer):
            continue
        first, last = weight.indices
        found = None
        if uses(first, var) and not uses(last, var):
            found = _copy_of(bufs.get("transposed", {}), weight.source)
        elif uses(last, var) and not uses(first, var):
            found = _copy_of(bufs.get("widened", {}), weight.source)
        if found is None or not found[1].pairs or not found[1].covers(weight.indices, var):
            continue
        if _paired(found[1].index(weight.indices, var)[1], axis):
            return Plan(weight, found[0], found[1], operand, axis, int(extent), summed[:-1], var)
    return None


def _copy_of(copies: dict, source):
    return next((copy for key, copy in copies.items() if key.same_as(source)), None)


def _paired(along, axis) -> bool:
    """Whether the copy's middle index `along` takes s = 2p and 2p + 1 to one word's two halves."""
    pair = tirx.Var("pair", "int32")
    analyzer = tvm.sym.Analyzer()
    analyzer.bind(pair, tvm.ir.Range(0, 1 << 20))
    low, high = substitute(along, {axis: pair * 2}), substitute(along, {axis: pair * 2 + 1})
    return analyzer.can_prove(tirx.floormod(low, 2) == 0) and analyzer.can_prove(high - low == 1)


def round_operands(the_plan, run, rows, rewriter):
    """The scratch array (uint32) of the run's nodes' operand pairs, written here: [node of the
    run, other summed axes..., s // 2], `rows` (the stage's: a bound on the run's nodes known
    where the function starts) long.  rewriter(mapping, position, row) rewrites an expression
    over the block's axes for one node (`emit_nest`).

    Each value's bfloat16 bits are stored at s in a uint16 array that the pairs' array aliases
    (little-endian: s = 2p in a word's low half, 2p + 1 in its high half), so the loop reads and
    writes along s in whole vectors; a loop over the pairs would read s at a stride of 2, which
    TVM's LLVM codegen builds element by element (6% of the forward's samples, Zen 4)."""
    others = [int(ext) for _, ext in the_plan.others]
    halves = Tb.alloc_buffer([rows] + others + [the_plan.extent], BF16_HALF)
    scratch = Tb.decl_buffer([rows] + others + [the_plan.extent // 2], PAIR_STORAGE, data=halves.data)
    with Tb.serial(0, run.count) as t:
        position = run.first + t
        row = run.row_base + position

        def at(mapping):
            def store(s):
                value = rewriter({**mapping, the_plan.axis: s}, position, row)(the_plan.operand)
                index = [t] + values_of(mapping, the_plan.others) + [s]
                Tb.buffer_store(halves, tirx.Cast(BF16_HALF, bf16_bits32(value)), index)
            vector_loop(the_plan.extent, LANES, store)
        axes_grid(the_plan.others, at)
    return scratch


def accumulate(the_plan, scratch, run, level, acc, width, column_of, mapping_of, rewriter, nest):
    """The sums of a register tile (`acc`: the tile's nodes x `width` columns, whole vectors of
    LANES) on pairs: for each other summed index (`nest`) and each pair of s, every node's pair
    broadcast against each vector of the weight's pairs.  column_of(lane): the column of a
    lane of the chunk; mapping_of(other axes' mapping): the block axes' mapping of the tile's
    columns' first lane."""
    analyzer = tvm.sym.Analyzer()

    def over_pairs(others):
        with Tb.serial(0, the_plan.extent // 2) as pair:
            with Tb.unroll(0, level.tile_size) as t:
                position, row = level.node(t)
                bits = scratch[[position - run.first] + values_of(others, the_plan.others) + [pair]]
                for vector in range(width // LANES):
                    column = column_of(vector * LANES)
                    if isinstance(column, int):          # (a chunk past the whole ones: a constant start)
                        column = tirx.const(column, "int32")
                    at = weight_word(the_plan, {**mapping_of(others, column), the_plan.axis: pair * 2},
                                     position, row, rewriter, analyzer)
                    words = tirx.BufferLoad(the_plan.copy, at[:2] + [tirx.Ramp(at[2], 1, LANES)])
                    lanes = [t, tirx.Ramp(vector * LANES, 1, LANES)]
                    Tb.buffer_store(acc, dot_pairs(acc[lanes], bits, words), lanes)
    with Tb.attr(tirx.const(0, "int32"), IMPORT_ATTR, tvm.ir.StringImm(LLVM_IR)):
        nest(the_plan.others, over_pairs)


def weight_word(the_plan, mapping, position, row, rewriter, analyzer) -> list:
    """The indices in the pair copy of the word holding the weight's read at `mapping` (the
    block's axes, the pair axis at an even s) for the node at (position, row)."""
    # (an index that is a bare axis maps to an expression: structural_map keeps a root's type)
    at = [analyzer.simplify(rewriter(mapping, position, row)(_rooted(i)))
          for i in the_plan.layout.index(the_plan.weight.indices, the_plan.inner)]
    return [at[0], analyzer.simplify(tirx.floordiv(at[1], 2)), at[2]]


def _rooted(index):
    """`index` under an Add node (structural_map keeps the type of its root: a bare axis must not
    be the root where it maps to an expression)."""
    return tirx.Add(index, tirx.const(0, "int32")) if isinstance(index, tvm.ir.Expr) else index


def padded_width(width: int) -> int:
    """A chunk's columns widened to whole vectors: the pair copies' panels are whole lines, so
    the columns past a block's end read the copy's zeros, and the sums there go unwritten."""
    return -(-width // LANES) * LANES
