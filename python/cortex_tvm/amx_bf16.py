"""TIR rewrite behind `RecSchedule.amx_bf16`: the GEMMs `dot_bf16` put on `vdpbf16ps` run on
Intel AMX tiles (`tdpbf16ps`), 16 nodes at a time.

An AMX core holds eight tile registers of up to 16 rows x 64 bytes.  `tdpbf16ps C, A, B`
adds to the float32 tile C (rows x 16) the product of A (rows x 16 bfloat16 pairs) and B (16
pair rows x 16 columns, each element a pair): 16 x 16 x 32 multiply-adds, 16 times one
`vdpbf16ps`.  The operands `dot_bf16` lays out are already the tiles' layouts:

* B: the weight's pairs `W_packed[a, kp, c]` (uint32: `W[.., 2 kp]` low, `W[.., 2 kp + 1]`
  high), 16 consecutive `kp` rows of 16 consecutive columns: one `tileloadd` with the packed
  row as stride;
* A: the state pairs `<gemm>_x_pairs[n, .., kp]` rounded once per node before the GEMM: 16
  consecutive pairs of up to 16 consecutive nodes;
* C: the accumulators `acc[n, .., c .. c + 16]` of up to 16 nodes, stored once at the end.

The rewrite takes a GEMM tiled one node at a time (`tile_gemm(node_tile=1)`), whose node
loop holds the accumulators' init, the update nest (after `dot_bf16`: one `cortex_dpbf16ps`
per column vector and pair) and the epilogue, and replaces that loop by blocks of up to 16
nodes: configure the tiles for the block's rows (`ldtilecfg`), zero up to six accumulator
tiles (one per column vector the update nest writes: TreeLSTM's five gates), then for every
16 pairs of the reduction load A once and, per accumulator tile, B and `tdpbf16ps`; store the
tiles; run the epilogue for each node of the block.  Tiles 0-5 hold accumulators, 6 A, 7 B;
more than six column vectors take several passes over A.

The intrinsics are LLVM's (`llvm.x86.tileloadd64` and the rest, with the tile register as an
immediate), called from TIR.  Linux lends a process the 8 KB of tile state only once it asks
(`arch_prctl(ARCH_REQ_XCOMP_PERM)`): `request_permission` does, before any AMX code runs; without
it the first tile instruction stops the process.
"""
from __future__ import annotations

import ctypes
import itertools

import tvm
import tvm_ffi
from tvm import tirx

from .target import host_isa, make_target

#: the LLVM x86 features the code needs
FEATURES = ("amx-tile", "amx-bf16")
#: rows of a tile (nodes of a block) and 32-bit elements of a tile row (pairs, float32 columns)
ROWS, ROW_ELEMENTS = 16, 16
#: tile registers: accumulators 0-5, the state pairs (A) 6, the weight pairs (B) 7
C_TILES, A_TILE, B_TILE = 6, 6, 7
#: the LLVM intrinsic whose calls mark AMX code (`uses_amx`)
DOT = "llvm.x86.tdpbf16ps"
#: the most reduction pairs whose index map the rewrite checks point by point
MAX_PAIRS = 1 << 14

_SYS_ARCH_PRCTL, _ARCH_REQ_XCOMP_PERM, _XFEATURE_XTILEDATA = 158, 0x1023, 18
_permission = []


class NotAmx(ValueError):
    """The GEMM's loop nest does not have the form the rewrite needs (the message says why)."""


# ----------------------------------------------------------------------------- targets
def has_feature(target) -> bool:
    """Whether the CPU target's LLVM features include AMX tiles with bfloat16 products."""
    target = make_target(target)
    if target.kind.name != "llvm":
        return False
    return set(FEATURES) <= set(tvm.target.codegen.llvm_get_cpu_features(target))


def uses_amx(mod) -> bool:
    """Whether a module (or PrimFunc) holds AMX tile products."""
    dot_id = tvm.target.codegen.llvm_lookup_intrinsic_id(DOT)
    found = []

    def on_call(call):
        if call.op.same_as(tvm.ir.Op.get("tirx.call_llvm_intrin")) and int(call.args[0]) == dot_id:
            found.append(call)
    funcs = mod.functions.values() if isinstance(mod, tvm.IRModule) else [mod]
    for func in funcs:
        if isinstance(func, tirx.PrimFunc):
            tvm_ffi.structural_walk(func.body, (tvm.ir.Call, on_call))
    return bool(found)


def check_target(mod, target) -> None:
    """ValueError when `mod` uses AMX and the target's CPU has no AMX-BF16; otherwise, for AMX
    code, the tile state requested for this process (`request_permission`)."""
    if not uses_amx(mod):
        return
    if not has_feature(target):
        mcpu = target.attrs.get("mcpu", "") if target.kind.name == "llvm" else target.kind.name
        raise ValueError(f"this schedule uses AMX tiles (amx_bf16), which need a CPU with AMX-BF16; the target "
                         f"{str(mcpu) or 'generic'!r} has none.  Build it for such a CPU (mcpu='sapphirerapids'), "
                         "or leave amx_bf16 out (dot_bf16 and store_bf16 run without AMX)")


def runs_here(mod) -> bool:
    """Whether `mod` holds AMX code and this CPU has AMX (code built here for another CPU is
    never run here, and asks for nothing)."""
    return uses_amx(mod) and set(FEATURES) <= host_isa()


def request_permission() -> None:
    """Ask Linux for this process's AMX tile state (once; a no-op after the first success).
    RuntimeError when the kernel refuses (too old, or AMX disabled)."""
    if _permission:
        return
    status = ctypes.CDLL(None, use_errno=True).syscall(_SYS_ARCH_PRCTL, _ARCH_REQ_XCOMP_PERM, _XFEATURE_XTILEDATA)
    if status != 0:
        raise RuntimeError(f"Linux refused this process the AMX tile state (arch_prctl ARCH_REQ_XCOMP_PERM: "
                           f"errno {ctypes.get_errno()}); AMX code cannot run here: compile with precision='bf16' "
                           "for a target without AMX (e.g. mcpu='cooperlake') or with precision='fp32'")
    _permission.append(True)


# ----------------------------------------------------------------------------- the rewrite
def _dtype(var) -> str:
    return str(var.ty)


def _subst(expr, mapping):
    return tvm_ffi.structural_map(expr, (tvm.ir.Var, lambda v: mapping.get(v, v)), order="post")


def _uses(expr, var) -> bool:
    found = []
    tvm_ffi.structural_walk(expr, (tvm.ir.Var, lambda v: found.append(v) if v.same_as(var) else None))
    return bool(found)


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


def _intrin(name, *args):
    return tirx.Evaluate(tirx.call_llvm_intrin("void", name, *args))


def _tile(index):
    return tirx.const(index, "uint8")


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
        holds = [(_has(p, update), _has(p, init)) for p in parts]
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
        single = {v: tirx.const(0, _dtype(v)) for v, lo, e in loops if isinstance(e, tirx.IntImm) and e.value == 1}
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
        acc_load, x_load, w_load = (_subst(e, single) for e in (acc_load, x_load, w_load))
        reduce = [(v, e.value) for v, e in loops if any(_uses(i, v) for i in x_load.indices)]
        tiles = [(v, e.value) for v, e in loops if any(_uses(i, v) for i in acc_load.indices)]
        if any(_uses(acc_load.indices[0], v) for v, _ in loops):
            raise NotAmx(f"{update!r} computes several nodes per tile; amx_bf16 takes a GEMM tiled one node "
                         "at a time (tile_gemm node_tile=1) and blocks 16 nodes itself")
        if {id(v) for v, _ in reduce} & {id(v) for v, _ in tiles} or len(reduce) + len(tiles) != len(loops):
            raise NotAmx(f"the loops of {update!r} are not split into reduction loops and column vectors")
        self.acc, self.x, self.w = acc_load.source, x_load.source, pairs
        self.x_row = self._row_stride(_flat(x_load.indices, self.x.shape), node, ana)
        zero = {v: tirx.const(0, _dtype(v)) for v, _ in reduce}
        x0 = _flat(x_load.indices, self.x.shape)
        w0 = _flat(w_load.indices, pairs.shape)
        self.pairs = self._check_pairs(reduce, x0, w0, zero, ana)
        if self.pairs % ROW_ELEMENTS:
            raise NotAmx(f"{update!r} reduces over {self.pairs} pairs, not a multiple of {ROW_ELEMENTS}")
        self.x_base = ana.simplify(_subst(x0, zero))
        self.outputs = []         # (accumulator load at the node, 16 lanes; weight offset at pair 0) per tile
        for values in itertools.product(*[range(e) for _, e in tiles]):
            at = {v: tirx.const(k, _dtype(v)) for (v, _), k in zip(tiles, values)}
            self.outputs.append((_subst(acc_load, at), ana.simplify(_subst(_subst(w0, zero), at))))
        self.ana = ana

    @staticmethod
    def _row_stride(offset, node, ana) -> int:
        step = ana.simplify(_subst(offset, {node: node + 1}) - offset)
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
        x_start, w_start = _subst(x0, zero), _subst(w0, zero)
        columns = int(self.w.shape[-1])
        seen = set()
        for values in itertools.product(*[range(e) for _, e in reduce]):
            at = {v: tirx.const(k, _dtype(v)) for (v, _), k in zip(reduce, values)}
            q = ana.simplify(_subst(x0, at) - x_start)
            dw = ana.simplify(_subst(w0, at) - w_start)
            if not (isinstance(q, tirx.IntImm) and isinstance(dw, tirx.IntImm) and dw.value == q.value * columns):
                raise NotAmx(f"{self.update!r}: the state pair and the weight pair row differ at {values}")
            seen.add(q.value)
        if seen != set(range(count)):
            raise NotAmx(f"{self.update!r}: the reduction does not visit pairs 0..{count - 1} once each")
        return count

    def rewrite(self):
        """The node loop as blocks of up to ROWS nodes on AMX tiles, each followed by its epilogue."""
        ana, node = self.ana, self.loop.loop_var
        block = tirx.Var("amx_block", _dtype(node))
        rows = tirx.Var("amx_rows", _dtype(node))
        first = block * ROWS
        config = tirx.decl_buffer((64,), "uint8", name="amx_config", scope="local")
        staging = tirx.decl_buffer((ROWS, ROW_ELEMENTS), "float32", name="amx_tile", scope="local")
        body = [self._zero_config(config)]
        body.append(tirx.BufferStore(config, tirx.const(1, "uint8"), [0]))      # palette 1
        for t in range(8):
            body.append(tirx.BufferStore(config, tirx.const(4 * ROW_ELEMENTS, "uint8"), [16 + 2 * t]))
            body.append(tirx.BufferStore(config, tirx.const(ROWS, "uint8") if t == B_TILE
                                         else tirx.Cast("uint8", rows), [48 + t]))
        body.append(_intrin("llvm.x86.ldtilecfg", tirx.address_of(tirx.BufferLoad(config, [0]))))
        x_stride = tirx.const(4 * self.x_row, "int64")
        w_stride = tirx.const(4 * int(self.w.shape[-1]), "int64")
        columns = int(self.w.shape[-1])
        for start in range(0, len(self.outputs), C_TILES):
            group = self.outputs[start:start + C_TILES]
            body += [_intrin("llvm.x86.tilezero", _tile(t)) for t in range(len(group))]
            chunk = tirx.Var("amx_chunk", _dtype(node))
            step = [_intrin("llvm.x86.tileloadd64", _tile(A_TILE), _address(
                self.x, _subst(self.x_base, {node: first}) + chunk * ROW_ELEMENTS, ana), x_stride)]
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
            member = tirx.Var("amx_node", _dtype(node))
            epilogue = _subst(tirx.SeqStmt(self.epilogue) if len(self.epilogue) > 1 else self.epilogue[0],
                              {node: first + member})
            parts.append(tirx.For(member, 0, rows, tirx.ForKind.SERIAL, epilogue))
        count = tirx.min(tirx.const(ROWS, _dtype(node)), self.loop.extent - first)
        blocks = tirx.floordiv(self.loop.extent + (ROWS - 1), ROWS)
        return tirx.For(block, 0, blocks, tirx.ForKind.SERIAL, tirx.SeqStmt([tirx.Bind(rows, count)] + parts))

    def _store(self, tile, acc_load, staging, first, rows):
        """Tile `tile` stored to `staging` (one tile, on the stack), then its rows copied, 16 lanes
        at a time, to the accumulators.  The build may move or shrink the accumulators'
        allocation (one column tile per thread), which would change a stride given to
        `tilestored`; the copy's indices follow it."""
        row = tirx.Var("amx_row", _dtype(self.loop.loop_var))
        lanes = tirx.Ramp(tirx.const(0, "int32"), 1, ROW_ELEMENTS)
        at = _subst(acc_load, {self.loop.loop_var: first + row})
        copy = tirx.BufferStore(self.acc, tirx.BufferLoad(staging, [row, lanes]), list(at.indices))
        return [_intrin("llvm.x86.tilestored64", _tile(tile), tirx.address_of(tirx.BufferLoad(staging, [0, 0])),
                        tirx.const(4 * ROW_ELEMENTS, "int64")),
                tirx.For(row, 0, rows, tirx.ForKind.SERIAL, copy)]

    @staticmethod
    def _zero_config(config):
        i = tirx.Var("amx_byte", "int32")
        return tirx.For(i, 0, 64, tirx.ForKind.SERIAL, tirx.BufferStore(config, tirx.const(0, "uint8"), [i]))


def _has(stmt, name) -> bool:
    found = []
    tvm_ffi.structural_walk(stmt, (tvm.s_tir.stmt.SBlock, lambda b: found.append(b) if b.name_hint == name else None))
    return bool(found)


def _node_loops(stmt, update, init, outer, out):
    """Collect (node loop, loops above it) for every loop whose body holds the init and the
    update nest of the GEMM as separate statements."""
    if isinstance(stmt, tirx.For):
        parts = list(stmt.body.seq) if isinstance(stmt.body, tirx.SeqStmt) else [stmt.body]
        if any(_has(p, update) for p in parts) and any(_has(p, init) and not _has(p, update) for p in parts):
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
    (func, how many loops); NotAmx when a loop
    does not have the form."""
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
