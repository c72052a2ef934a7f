"""The kernel side of `dot_bf16` (`RecSchedule.dot_bf16`): a tiled GEMM's update, its 16-lane loop
around a pair of reduction steps, becomes one `cortex_dpbf16ps` call (`vdpbf16ps`), with a stage
before it that rounds each node's state operand to bfloat16 pairs once.  The weights' pairs,
the target check and the LLVM function are `dot_bf16.py`'s."""
from __future__ import annotations

import tvm
import tvm_ffi
from tvm import tirx

from .dot_bf16 import IMPORT_ATTR, LANES, LLVM_IR, PAIR_STORAGE, dot_pairs, has_block, pair_bits
from .tir_builder import substitute, uses, var_dtype


class NotADot(ValueError):
    """The GEMM update does not have the form the rewrite needs (the message says why)."""


def _all_loads(expr) -> list:
    found = []
    tvm_ffi.structural_walk(expr, (tvm.ir.TensorLoad, found.append))
    return found


def _loads_of(expr, buffer) -> list:
    found = []
    tvm_ffi.structural_walk(expr, (tvm.ir.TensorLoad,
                                   lambda ld: found.append(ld) if ld.source.same_as(buffer) else None))
    return found


class _Update:
    """One GEMM update `acc[...] = acc[...] + W[a, k, c] * x` under `for lane: for pair:`,
    analysed in the loop variables: what the vector form needs, or NotADot."""

    def __init__(self, lane_loop, pair_loop, realize, weight):
        ana = tvm.sym.Analyzer()
        L, P = lane_loop.loop_var, pair_loop.loop_var
        self.w_source, self.pair_var = weight, P
        block = realize.block
        bind = {iv.var: value for iv, value in zip(block.iter_vars, realize.iter_values)}
        store = substitute(block.body, bind)
        if not isinstance(store, tirx.BufferStore) or block.init is not None:
            raise NotADot(f"{block.name_hint!r} is not one store (decompose its reduction first)")
        value = store.value
        if not isinstance(value, tirx.Add):
            raise NotADot(f"{block.name_hint!r} does not accumulate (acc + w * x)")

        def reads_accumulator(e) -> bool:
            return (isinstance(e, tvm.ir.TensorLoad) and e.source.same_as(store.buffer)
                    and all(ana.can_prove_equal(i, j) for i, j in zip(e.indices, store.indices)))
        acc_load, product = (value.a, value.b) if reads_accumulator(value.a) else (value.b, value.a)
        if not reads_accumulator(acc_load):
            raise NotADot(f"{block.name_hint!r} does not accumulate into the buffer it reads")
        if not isinstance(product, tirx.Mul):
            raise NotADot(f"{block.name_hint!r} does not add a product")
        w, x = product.a, product.b
        if not (isinstance(w, tvm.ir.TensorLoad) and w.source.same_as(weight)):
            w, x = x, w
        if not (isinstance(w, tvm.ir.TensorLoad) and w.source.same_as(weight)) or _loads_of(x, weight):
            raise NotADot(f"{block.name_hint!r} does not multiply one load of {weight.name!r} by a value "
                          "that does not read it")
        if str(store.buffer.dtype) != "float32" or var_dtype(x) != "float32":
            raise NotADot(f"{block.name_hint!r} is not float32")
        if uses(x, L):
            raise NotADot(f"the state operand of {block.name_hint!r} changes along the lanes")
        pred = substitute(realize.predicate, bind)
        if uses(pred, L) or uses(pred, P):
            raise NotADot(f"{block.name_hint!r} has a bounds check inside the lanes")

        def at(e, lane, pair):
            return ana.simplify(substitute(e, {L: tirx.const(lane, var_dtype(L)), P: tirx.const(pair, var_dtype(P))}))

        def steps(indices, dim_lane, dim_pair):
            base = [at(i, 0, 0) for i in indices]
            for d, i in enumerate(indices):
                if not ana.can_prove_equal(at(i, LANES - 1, 0) - base[d], LANES - 1 if d == dim_lane else 0):
                    return None
                if not ana.can_prove_equal(at(i, 0, 1) - base[d], 1 if d == dim_pair else 0):
                    return None
            return base

        acc_base = steps(list(store.indices), len(store.indices) - 1, None)
        if acc_base is None:
            raise NotADot(f"{block.name_hint!r}: the lanes are not consecutive accumulators")
        if len(w.indices) != 3:
            raise NotADot(f"{weight.name!r} is not packed as [tile, k, column]")
        w_base = steps(list(w.indices), 2, 1)
        if w_base is None:
            raise NotADot(f"{block.name_hint!r}: the lanes are not consecutive columns of {weight.name!r} "
                          "or the pair not consecutive reduction indices")
        if not ana.can_prove_equal(tirx.floormod(w_base[1], 2), 0):
            raise NotADot(f"{block.name_hint!r}: the pairs of reduction indices do not start at even indices")
        self.store, self.acc_base, self.w_base = store, acc_base, w_base
        self.x0, self.x1 = at(x, 0, 0), at(x, 0, 1)
        self.predicate = at(pred, 0, 0)
        self.name = block.name_hint
        self.pairs = self._pairs_stage(block, bind, at, ana)

    def _pairs_stage(self, block, bind, at, ana):
        """How to round the state operand once per node (see `prologue`), or None when its form
        does not allow it: (node iter var, other reduction iter vars, the pair's iter var, the
        operand in block variables)."""
        body = block.body
        if not isinstance(body, tirx.BufferStore) or not isinstance(body.value, tirx.Add):
            return None
        product = body.value.b if isinstance(body.value.b, tirx.Mul) else body.value.a
        if not isinstance(product, tirx.Mul):
            return None
        x = product.b if _loads_of(product.a, self.w_source) else product.a
        if _loads_of(x, self.w_source) or not body.indices or not body.indices[0].same_as(block.iter_vars[0].var):
            return None
        node = block.iter_vars[0]
        moving = [iv for iv in block.iter_vars if uses(bind[iv.var], self.pair_var)]
        if len(moving) != 1 or moving[0].iter_type != 2 or node.iter_type != 0:
            return None
        pair = moving[0]
        if not ana.can_prove_equal(at(bind[pair.var], 0, 1) - at(bind[pair.var], 0, 0), 1):
            return None
        others = [iv for iv in block.iter_vars if iv.iter_type == 2 and not iv.same_as(pair)]
        domains = [pair] + others
        if not all(isinstance(iv.dom.extent, tirx.IntImm) and isinstance(iv.dom.min, tirx.IntImm)
                   and iv.dom.min.value == 0 for iv in domains) or pair.dom.extent.value % 2:
            return None
        if not (isinstance(node.dom.min, tirx.IntImm) and node.dom.min.value == 0):
            return None
        allowed = [node, pair] + others
        if any(uses(x, iv.var) for iv in block.iter_vars if not any(iv.same_as(a) for a in allowed)):
            return None        # the operand varies along a spatial axis other than the node
        index = [at(bind[node.var], 0, 0)] + [at(bind[iv.var], 0, 0) for iv in others] \
            + [tirx.floordiv(at(bind[pair.var], 0, 0), 2)]
        return node, others, pair, x, index

    def prologue(self):
        """(scratch buffer, loop nest): the state operand of every node of the scope, for every
        reduction index pair, rounded to bfloat16 and packed into a uint32, once; the GEMM then
        broadcasts one load of it instead of rounding the pair at each column tile."""
        node, others, pair, x, _ = self.pairs
        acc = self.store.buffer
        shape = [acc.shape[0]] + [iv.dom.extent for iv in others] + [pair.dom.extent.value // 2]
        scratch = tirx.decl_buffer(shape, PAIR_STORAGE, name=f"{self.name}_x_pairs")
        v_node = tirx.Var("v_n", "int32")
        v_others = [tirx.Var(f"v_r{i}", "int32") for i in range(len(others))]
        v_pair = tirx.Var("v_kp", "int32")
        mapping = {node.var: v_node, **{iv.var: v for iv, v in zip(others, v_others)}}
        low = substitute(x, {**mapping, pair.var: v_pair * 2})
        high = substitute(x, {**mapping, pair.var: v_pair * 2 + 1})
        body = tirx.BufferStore(scratch, pair_bits(low, high), [v_node, *v_others, v_pair])
        iter_vars = ([tirx.IterVar(node.dom, v_node, tirx.IterVar.DataPar)]
                     + [tirx.IterVar(iv.dom, v, tirx.IterVar.DataPar) for iv, v in zip(others, v_others)]
                     + [tirx.IterVar(tvm.ir.Range(0, shape[-1]), v_pair, tirx.IterVar.DataPar)])
        name = f"{self.name}_x_pairs"
        block = _with_regions(tvm.s_tir.stmt.SBlock(iter_vars, [], [], name, body), body)
        loops = [tirx.Var(n, "int32") for n in ["n"] + [f"r{i}" for i in range(len(others))] + ["kp"]]
        nest = tvm.s_tir.stmt.SBlockRealize(loops, True, block)
        for loop, iv in reversed(list(zip(loops, iter_vars))):
            nest = tirx.For(loop, 0, iv.dom.extent, tirx.ForKind.SERIAL, nest)
        return scratch, nest

    def vector_block(self, pairs, scratch=None):
        """The realize of an opaque block computing the 16 lanes x 2 pairs with one call; the
        state's pair read from `scratch` (see `prologue`) or rounded here."""
        acc = self.store.buffer
        idx = self.acc_base[:-1] + [tirx.Ramp(self.acc_base[-1], 1, LANES)]
        a, k, c = self.w_base
        weights = tirx.BufferLoad(pairs, [a, tirx.floordiv(k, 2), tirx.Ramp(c, 1, LANES)])
        bits = pair_bits(self.x0, self.x1) if scratch is None else tirx.BufferLoad(scratch, self.pairs[4])
        body = tirx.BufferStore(acc, dot_pairs(tirx.BufferLoad(acc, idx), bits, weights), idx)
        block = _with_regions(tvm.s_tir.stmt.SBlock([], [], [], self.name, body), body)
        return tvm.s_tir.stmt.SBlockRealize([], self.predicate, block)


def _with_regions(block, body):
    """`block` with the read and write regions of its body (one store)."""
    buffers = {ld.source: ld.source for ld in _all_loads(body)}
    buffers[body.buffer] = body.buffer
    reads, writes = tvm.s_tir.analysis.get_sblock_read_write_region(block, buffers)
    return tvm.s_tir.stmt.SBlock(block.iter_vars, reads, writes, block.name_hint, body)


def _lane_pair_nest(f, block_name):
    """(pair loop, realize) when `f` is `for lane in T.vectorized(16): for pair in range(2):
    realize(block_name)`, else None."""
    if (f.kind != tirx.ForKind.VECTORIZED or not isinstance(f.extent, tirx.IntImm) or f.extent.value != LANES
            or not isinstance(f.body, tirx.For)):
        return None
    pair = f.body
    if not (isinstance(pair.extent, tirx.IntImm) and pair.extent.value == 2
            and isinstance(pair.body, tvm.s_tir.stmt.SBlockRealize) and pair.body.block.name_hint == block_name):
        return None
    return pair, pair.body


def check_update(func, block_name: str, weight):
    """NotADot unless every `block_name` realize under a lane x pair nest has the dot form."""
    count = [0]

    def on_for(f):
        nest = _lane_pair_nest(f, block_name)
        if nest is not None:
            _Update(f, nest[0], nest[1], weight)
            count[0] += 1
    tvm_ffi.structural_walk(func.body, (tirx.For, on_for), order="pre")
    if not count[0]:
        raise NotADot(f"no {LANES}-lane x pair loop nest around {block_name!r}")


def rewrite_updates(func, block_name: str, weight, pairs, round_once: bool = True):
    """Each `for lane (16, vectorized): for pair (2): realize(block_name)` becomes one block
    calling `cortex_dpbf16ps` (its LLVM IR imported at that point: TVM links each import, and the
    internal function is inlined wherever it is called).

    With `round_once` (and a state operand that depends only on the node and the reduction
    indices), a stage before the GEMM's loop nest, in the same scope block, rounds the operand
    of every node to bfloat16 pairs once (`<block>_x_pairs`, a uint32 scratchpad as large as
    the accumulators' rows); otherwise each use rounds its pair.  Returns (func, how many nests)."""
    count, stages = [0], []

    def on_for(f):
        nest = _lane_pair_nest(f, block_name)
        if nest is None:
            return f
        update = _Update(f, nest[0], nest[1], weight)
        count[0] += 1
        scratch = None
        if round_once and update.pairs is not None and not stages:
            scratch, stage = update.prologue()
            stages.append((scratch, stage))
        return tirx.AttrStmt(tirx.const(0, "int32"), IMPORT_ATTR, tvm.ir.StringImm(LLVM_IR),
                             update.vector_block(pairs, scratch))
    func = tvm_ffi.structural_map(func, (tirx.For, on_for), order="post")
    if stages:
        func = _insert_stage(func, block_name, *stages[0])
    return func, count[0]


def _insert_stage(func, block_name, scratch, stage):
    """`stage` right before the statement of the innermost scope block that holds `block_name`,
    `scratch` allocated in that block."""
    done = []

    def holds(stmt):
        return has_block(stmt, block_name)

    def on_block(b):
        if done or b.name_hint == block_name or not holds(b.body):
            return b
        parts = list(b.body.seq) if isinstance(b.body, tirx.SeqStmt) else [b.body]
        at = next(i for i, part in enumerate(parts) if holds(part))
        parts.insert(at, stage)
        done.append(b.name_hint)
        return tvm.s_tir.stmt.SBlock(b.iter_vars, b.reads, b.writes, b.name_hint, tirx.SeqStmt(parts), b.init,
                                     list(b.alloc_buffers) + [scratch], b.match_buffers, b.annotations)
    func = tvm_ffi.structural_map(func, (tvm.s_tir.stmt.SBlock, on_block), order="post")
    if not done:
        raise NotADot(f"no scope block holds {block_name!r}")
    return func
