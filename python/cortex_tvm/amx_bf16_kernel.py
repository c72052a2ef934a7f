"""The kernel side of `amx_bf16` (`RecSchedule.amx_bf16`): a GEMM's node loop, after `dot_bf16`,
as blocks of up to 16 nodes on AMX tiles (see `amx_bf16.py` for the tiles, the target check and
the tile state a process asks for).

The loop nest it takes (a GEMM tiled one node at a time, `tile_gemm(node_tile=1)`): the node
loop's body holds the accumulators' init, the update nest (one `cortex_dpbf16ps` per column
vector and reduction pair) and the epilogue.  What it writes per block of nodes: the tile
configuration for the block's rows (`ldtilecfg`), up to six accumulator tiles zeroed at a time
(one per column vector the update nest writes: TreeLSTM's five gates times the tile's column
vectors, ten with the default two), then for every 16 pairs of the
reduction the state tile loaded once and, per accumulator tile, the weight tile and
`tdpbf16ps`; the tiles stored through a stack tile and copied row by row; the epilogue per node
of the block.  Tiles 0-5 hold accumulators, 6 the state pairs (A), 7 the weight pairs (B); more
than six column vectors take several passes over A.
"""
from __future__ import annotations

import itertools

import tvm
import tvm_ffi
from tvm import tirx

from .amx_bf16 import CONFIG_BYTES, DOT, ROW_BYTES, config_bytes, intrin as _intrin, tile as _tile
from .dot_bf16 import has_block
from .tir_builder import substitute, uses, var_dtype

#: rows of a tile (nodes of a block) and 32-bit elements of a tile row (pairs, float32 columns)
ROWS, ROW_ELEMENTS = 16, 16
#: tile registers: accumulators 0-5, the state pairs (A) 6, the weight pairs (B) 7
C_TILES, A_TILE, B_TILE = 6, 6, 7
#: the most reduction pairs whose index map the rewrite checks point by point
MAX_PAIRS = 1 << 14


class NotAmx(ValueError):
    """The GEMM's loop nest does not have the form the rewrite needs (the message says why)."""


def _flat(indices, shape):
    """The row-major element offset of `indices` (the last one's base where it is a Ramp)."""
    indices = [i.base if isinstance(i, tirx.Ramp) else i for i in indices]
    offset = indices[0]
    for i, extent in zip(indices[1:], shape[1:]):
        offset = offset * extent + i
    return offset


def _unflat(offset, shape):
    """Indices of a buffer of `shape` at the row-major element offset `offset`."""
    indices = []
    for extent in reversed(list(shape[1:])):
        indices.append(tirx.floormod(offset, extent))
        offset = tirx.floordiv(offset, extent)
    return [offset] + indices[::-1]


def _address(buffer, offset, ana):
    return tirx.address_of(tirx.BufferLoad(buffer, [ana.simplify(i) for i in _unflat(offset, buffer.shape)]))


def _dot_call(stmt, update):
    """The `cortex_dpbf16ps` call of the `update` realize under `stmt` and the loops above it
    (var, extent), or None."""
    if isinstance(stmt, tirx.For):
        found = _dot_call(stmt.body, update)
        return None if found is None else (found[0], [(stmt.loop_var, stmt.min, stmt.extent)] + found[1])
    if isinstance(stmt, tirx.AttrStmt):
        return _dot_call(stmt.body, update)
    if isinstance(stmt, tvm.s_tir.stmt.SBlockRealize) and stmt.block.name_hint == update:
        store = stmt.block.body
        if isinstance(store, tirx.BufferStore) and isinstance(store.value, tvm.ir.Call):
            return store.value, []
    return None


class _Nest:
    """One node loop of a GEMM after dot_bf16, analysed: its update's operands as functions of
    the node, the reduction pair and the accumulator tile, or NotAmx."""

    def __init__(self, node_loop, update, init, outer, pairs):
        self.loop, self.update, self.init = node_loop, update, init
        parts = list(node_loop.body.seq) if isinstance(node_loop.body, tirx.SeqStmt) else [node_loop.body]
        holds = [(has_block(p, update), has_block(p, init)) for p in parts]
        if sum(u for u, _ in holds) != 1:
            raise NotAmx(f"the node loop of {update!r} holds {sum(u for u, _ in holds)} update nests, not one")
        found = _dot_call(parts[[u for u, _ in holds].index(True)], update)
        if found is None:
            raise NotAmx(f"{update!r} is not one cortex_dpbf16ps call per column vector (apply dot_bf16 first)")
        self.epilogue = [p for p, (u, i) in zip(parts, holds) if not u and not i]
        call, loops = found
        if not (isinstance(node_loop.min, tirx.IntImm) and node_loop.min.value == 0):
            raise NotAmx(f"the node loop of {update!r} does not start at 0")
        ana = tvm.sym.Analyzer()
        for var, lo, extent in outer + [(node_loop.loop_var, node_loop.min, node_loop.extent)] + loops:
            ana.bind(var, tvm.ir.Range.from_min_extent(lo, extent))
        single = {v: tirx.const(0, var_dtype(v)) for v, lo, e in loops if isinstance(e, tirx.IntImm) and e.value == 1}
        loops = [(v, e) for v, lo, e in loops if v not in single]
        if any(not isinstance(e, tirx.IntImm) for _, e in loops):
            raise NotAmx(f"the update nest of {update!r} has a loop of unknown extent")
        acc_load, broadcast, weights = call.args[1], call.args[2], call.args[3]
        x_load = broadcast.value.args[0] if isinstance(broadcast, tirx.Broadcast) else None
        w_load = weights.args[0] if isinstance(weights, tvm.ir.Call) else None
        if not isinstance(x_load, tvm.ir.TensorLoad):
            raise NotAmx(f"{update!r} rounds its state pair at each use (no rounding stage before the GEMM: "
                         "persistent_threads or unroll_recursion)")
        if not (isinstance(w_load, tvm.ir.TensorLoad) and any(w_load.source.same_as(p) for p in pairs)):
            raise NotAmx(f"{update!r} does not read a weight's pairs ({[p.name for p in pairs]})")
        pairs = w_load.source
        node = node_loop.loop_var
        acc_load, x_load, w_load = (substitute(e, single) for e in (acc_load, x_load, w_load))
        reduce = [(v, e.value) for v, e in loops if any(uses(i, v) for i in x_load.indices)]
        tiles = [(v, e.value) for v, e in loops if any(uses(i, v) for i in acc_load.indices)]
        if any(uses(acc_load.indices[0], v) for v, _ in loops):
            raise NotAmx(f"{update!r} computes several nodes per tile; amx_bf16 takes a GEMM tiled one node "
                         "at a time (tile_gemm node_tile=1) and blocks 16 nodes itself")
        if {id(v) for v, _ in reduce} & {id(v) for v, _ in tiles} or len(reduce) + len(tiles) != len(loops):
            raise NotAmx(f"the loops of {update!r} are not split into reduction loops and column vectors")
        self.acc, self.x, self.w = acc_load.source, x_load.source, pairs
        self.x_row = self._row_stride(_flat(x_load.indices, self.x.shape), node, ana)
        zero = {v: tirx.const(0, var_dtype(v)) for v, _ in reduce}
        x0 = _flat(x_load.indices, self.x.shape)
        w0 = _flat(w_load.indices, pairs.shape)
        self.pairs = self._check_pairs(reduce, x0, w0, zero, ana)
        if self.pairs % ROW_ELEMENTS:
            raise NotAmx(f"{update!r} reduces over {self.pairs} pairs, not a multiple of {ROW_ELEMENTS}")
        self.x_base = ana.simplify(substitute(x0, zero))
        self.outputs = []         # (accumulator load at the node, 16 lanes; weight offset at pair 0) per tile
        for values in itertools.product(*[range(e) for _, e in tiles]):
            at = {v: tirx.const(k, var_dtype(v)) for (v, _), k in zip(tiles, values)}
            self.outputs.append((substitute(acc_load, at), ana.simplify(substitute(substitute(w0, zero), at))))
        self.ana = ana

    @staticmethod
    def _row_stride(offset, node, ana) -> int:
        step = ana.simplify(substitute(offset, {node: node + 1}) - offset)
        if not isinstance(step, tirx.IntImm):
            raise NotAmx(f"consecutive nodes are not a constant stride apart ({step})")
        return step.value

    def _check_pairs(self, reduce, x0, w0, zero, ana) -> int:
        """The reduction's pair count, after checking that each reduction point reads the pair q
        of the state row and the weight pair row q (point by point)."""
        count = 1
        for _, e in reduce:
            count *= e
        if count > MAX_PAIRS:
            raise NotAmx(f"{count} reduction pairs: more than the {MAX_PAIRS} this rewrite checks")
        x_start, w_start = substitute(x0, zero), substitute(w0, zero)
        columns = int(self.w.shape[-1])
        seen = set()
        for values in itertools.product(*[range(e) for _, e in reduce]):
            at = {v: tirx.const(k, var_dtype(v)) for (v, _), k in zip(reduce, values)}
            q = ana.simplify(substitute(x0, at) - x_start)
            dw = ana.simplify(substitute(w0, at) - w_start)
            if not (isinstance(q, tirx.IntImm) and isinstance(dw, tirx.IntImm) and dw.value == q.value * columns):
                raise NotAmx(f"{self.update!r}: the state pair and the weight pair row differ at {values}")
            seen.add(q.value)
        if seen != set(range(count)):
            raise NotAmx(f"{self.update!r}: the reduction does not visit pairs 0..{count - 1} once each")
        return count

    def rewrite(self):
        """The node loop as blocks of up to ROWS nodes on AMX tiles, each followed by its epilogue."""
        ana, node = self.ana, self.loop.loop_var
        block = tirx.Var("amx_block", var_dtype(node))
        rows = tirx.Var("amx_rows", var_dtype(node))
        first = block * ROWS
        config = tirx.decl_buffer((CONFIG_BYTES,), "uint8", name="amx_config", scope="local")
        staging = tirx.decl_buffer((ROWS, ROW_ELEMENTS), "float32", name="amx_tile", scope="local")
        shapes = {t: (ROWS if t == B_TILE else tirx.Cast("uint8", rows), ROW_BYTES) for t in range(8)}
        body = [tirx.BufferStore(config, value, [i]) for i, value in enumerate(config_bytes(shapes))]
        body.append(_intrin("llvm.x86.ldtilecfg", tirx.address_of(tirx.BufferLoad(config, [0]))))
        x_stride = tirx.const(4 * self.x_row, "int64")
        w_stride = tirx.const(4 * int(self.w.shape[-1]), "int64")
        columns = int(self.w.shape[-1])
        for start in range(0, len(self.outputs), C_TILES):
            group = self.outputs[start:start + C_TILES]
            body += [_intrin("llvm.x86.tilezero", _tile(t)) for t in range(len(group))]
            chunk = tirx.Var("amx_chunk", var_dtype(node))
            step = [_intrin("llvm.x86.tileloadd64", _tile(A_TILE), _address(
                self.x, substitute(self.x_base, {node: first}) + chunk * ROW_ELEMENTS, ana), x_stride)]
            for t, (_, w_offset) in enumerate(group):
                step.append(_intrin("llvm.x86.tileloadd64", _tile(B_TILE), _address(
                    self.w, w_offset + chunk * (ROW_ELEMENTS * columns), ana), w_stride))
                step.append(_intrin(DOT, _tile(t), _tile(A_TILE), _tile(B_TILE)))
            body.append(tirx.For(chunk, 0, self.pairs // ROW_ELEMENTS, tirx.ForKind.SERIAL, tirx.SeqStmt(step)))
            for t, (acc_load, _) in enumerate(group):
                body += self._store(t, acc_load, staging, first, rows)
        regions = [tirx.BufferRegion(b, [tvm.ir.Range.from_min_extent(0, d) for d in b.shape])
                   for b in (self.x, self.w, self.acc)]
        tiles = tvm.s_tir.stmt.SBlock([], regions[:2], regions[2:], f"{self.update}_amx", tirx.SeqStmt(body),
                                      alloc_buffers=[config, staging])
        parts = [tvm.s_tir.stmt.SBlockRealize([], True, tiles)]
        if self.epilogue:
            member = tirx.Var("amx_node", var_dtype(node))
            epilogue = substitute(tirx.SeqStmt(self.epilogue) if len(self.epilogue) > 1 else self.epilogue[0],
                              {node: first + member})
            parts.append(tirx.For(member, 0, rows, tirx.ForKind.SERIAL, epilogue))
        count = tirx.min(tirx.const(ROWS, var_dtype(node)), self.loop.extent - first)
        blocks = tirx.floordiv(self.loop.extent + (ROWS - 1), ROWS)
        return tirx.For(block, 0, blocks, tirx.ForKind.SERIAL, tirx.SeqStmt([tirx.Bind(rows, count)] + parts))

    def _store(self, tile, acc_load, staging, first, rows):
        """Tile `tile` stored to `staging` (one tile, on the stack), then its rows copied, 16 lanes
        at a time, to the accumulators.  The build may move or shrink the accumulators'
        allocation (one column tile per thread), which would change a stride given to
        `tilestored`; the copy's indices follow it."""
        row = tirx.Var("amx_row", var_dtype(self.loop.loop_var))
        lanes = tirx.Ramp(tirx.const(0, "int32"), 1, ROW_ELEMENTS)
        at = substitute(acc_load, {self.loop.loop_var: first + row})
        copy = tirx.BufferStore(self.acc, tirx.BufferLoad(staging, [row, lanes]), list(at.indices))
        return [_intrin("llvm.x86.tilestored64", _tile(tile), tirx.address_of(tirx.BufferLoad(staging, [0, 0])),
                        tirx.const(4 * ROW_ELEMENTS, "int64")),
                tirx.For(row, 0, rows, tirx.ForKind.SERIAL, copy)]


def _node_loops(stmt, update, init, outer, out):
    """Collect (node loop, loops above it) for every loop whose body holds the init and the
    update nest of the GEMM as separate statements."""
    if isinstance(stmt, tirx.For):
        parts = list(stmt.body.seq) if isinstance(stmt.body, tirx.SeqStmt) else [stmt.body]
        holds = [(has_block(p, update), has_block(p, init)) for p in parts]
        if any(u for u, _ in holds) and any(i and not u for u, i in holds):
            out.append((stmt, list(outer)))
            return
        _node_loops(stmt.body, update, init, outer + [(stmt.loop_var, stmt.min, stmt.extent)], out)
    elif isinstance(stmt, tirx.SeqStmt):
        for s in stmt.seq:
            _node_loops(s, update, init, outer, out)
    elif isinstance(stmt, tvm.s_tir.stmt.SBlockRealize):
        _node_loops(stmt.block.body, update, init, outer, out)
    elif isinstance(stmt, (tirx.AttrStmt, tirx.DeclBuffer)) and getattr(stmt, "body", None) is not None:
        _node_loops(stmt.body, update, init, outer, out)
    elif isinstance(stmt, tirx.IfThenElse):
        _node_loops(stmt.then_case, update, init, outer, out)
        if stmt.else_case is not None:
            _node_loops(stmt.else_case, update, init, outer, out)


def rewrite(func, update: str, pairs):
    """Each node loop of the GEMM whose update is `update` (after dot_bf16, one node per tile;
    `pairs`: the kernel's weight-pair buffers) on AMX tiles (see the module docstring).  Returns
    (func, how many loops); NotAmx when a loop does not have the form."""
    init = update[:-len("_update")] + "_init" if update.endswith("_update") else update + "_init"
    found = []
    _node_loops(func.body, update, init, [], found)
    nests = [_Nest(loop, update, init, outer, pairs) for loop, outer in found]

    def on_for(f):
        nest = next((n for n in nests if f.loop_var.same_as(n.loop.loop_var)), None)
        return f if nest is None else nest.rewrite()
    if not nests:
        return func, 0
    return tvm_ffi.structural_map(func, (tirx.For, on_for), order="post"), len(nests)
