"""bfloat16 weights: `store_bf16` (stored as bfloat16, widened to float32 where read) and
`dot_bf16` (the tiled GEMMs on AVX512_BF16's `vdpbf16ps`, `dot_bf16.py`)."""
from __future__ import annotations

from dataclasses import replace

import tvm
import tvm_ffi

from .. import amx_bf16_kernel as _amx
from .. import level_tails as _tails
from .. import dot_bf16 as _dot
from .. import dot_bf16_kernel as _kernel
from .. import tir_rewrites
from ..tir_builder import uses
from ..lower import FUNC_NAME, TRANSFORM_FUNC
from .core import REDUCE as _REDUCE
from .core import ScheduleError, primitive
from .layout import packed_name


class Bf16Primitives:

    @primitive
    def store_bf16(self, weight: str | None = None):
        """Keep packed weights as bfloat16 in memory; compute with them in float32.

        The parameter transform rounds each packed weight to bfloat16 (nearest,
        ties to even) and writes its 16 bits to a uint16 array; the kernel
        widens each value to float32 where it is loaded (a shift, in
        registers), so accumulation, states and the epilogue stay float32.
        The weight streams with half the bytes: what bounds a level whose
        nodes are few (batch 1, the top levels of any tree) is reading the
        weight, not the FMAs.  Accuracy: the model as if those weights were
        rounded to bfloat16 (8 significant bits: a relative error of at most
        2**-8 per weight).

        Requires: the weight packed (pack) and float32; `weight` None means
        every packed weight the kernel reads that is not bfloat16 already
        (`dot_bf16` before it keeps its weights; one that only the parameter
        transform reads, such as the weights of hoisted leaf tables, gains
        nothing from fewer bytes and keeps float32).

        Parameters
        ----------
        weight : str or None   a packed weight (e.g. "U"); None for every one the kernel reads

        Returns
        -------
        self

        Raises
        ------
        ScheduleError  a weight that is not packed, or stored as bfloat16 already; None and
                       no packed weight the kernel reads

        Examples
        --------
        Before (after ``pack("U", tile=8, groups=5)``)::

            gates_sum[n, g, i] += U_packed[i // 8, j * 256 + k, g * 8 + i % 8] * h[children[n, j], k]

        ``rs.store_bf16()``; after (U_packed: uint16)::

            gates_sum[n, g, i] += T.reinterpret("float32", T.Cast("uint32", U_packed[i // 8, j * 256 + k,
                                  g * 8 + i % 8]) << T.uint32(16)) * h[children[n, j], k]

        and in ``cortex_transform_params``, ``U_packed[a, c, b] = T.Cast("uint16", (bits + 0x7FFF
        + (bits >> 16 & 1)) >> 16)`` with ``bits = T.reinterpret("uint32", U[...])``.
        """
        packed = [p[0] for p in self.plan.packs]
        in_kernel = {p.name for p in self.func.params}
        read = [name for name in packed if packed_name(name) in in_kernel]
        chosen = [weight] if weight is not None else [n for n in read if n not in self.plan.bf16_weights]
        if weight is None and read and not chosen:
            return self       # every packed weight the kernel reads is bfloat16 already (dot_bf16)
        for name in chosen:
            if name not in packed:
                raise ScheduleError(f"store_bf16: {name!r} is not packed; packed weights are {packed} "
                                    "(pack a weight first: its packed copy is what is stored as bfloat16)")
            if name in self.plan.bf16_weights:
                raise ScheduleError(f"store_bf16: {name!r} is stored as bfloat16 already")
        if not chosen:
            raise ScheduleError("store_bf16: no packed weight is read by the kernel "
                                f"(packed: {packed or 'none'}); pack the GEMM weights first")
        functions = self._functions()
        for name in chosen:
            for fname, func in list(functions.items()):
                if any(p.name == packed_name(name) for p in func.params):
                    try:
                        functions[fname] = tir_rewrites.store_bf16(func, packed_name(name))
                    except ValueError as err:
                        raise ScheduleError(f"store_bf16: {err}") from err
        self._replace(**functions)
        self.plan = replace(self.plan, bf16_weights=self.plan.bf16_weights + tuple(chosen))
        return self

    @primitive
    def dot_bf16(self, weight: str | None = None, round_once_only: bool = False):
        """Multiply packed weights in bfloat16 with AVX512_BF16's `vdpbf16ps` (32 multiply-adds per instruction).

        For a weight whose GEMMs are register-tiled (`tile_gemm`, 16 lanes):
        the parameter transform writes its packed copy as bfloat16 with the
        pairs of consecutive reduction indices interleaved (`W_packed[a, k // 2, c]`,
        a uint32: `W[.., k]` in the low half, `W[.., k + 1]` in the high
        half); a stage before each GEMM rounds the state operand of every node
        of the level to bfloat16 pairs the same way, once (`<gemm>_x_pairs`);
        and the GEMM's innermost reduction loop is split by 2, its pair loop
        moved inside the 16 lanes and both replaced by one `vdpbf16ps`: 16
        float32 accumulators += 16 weight pairs . the node's state pair,
        broadcast.  Accumulation, states and the epilogue stay float32; the
        weight streams with half the bytes and the GEMM issues half the
        instructions of the float32 FMA kernel.  Rounding is to nearest, ties
        to even.  Accuracy: both factors of every product rounded to bfloat16
        (8 significant bits); with float32 sums the zoo models' roots stay
        within 1e-2 of float64 (docs/benchmarks.md).  Any other read of the
        weight widens its half of the pair to float32.  Where the level runs
        as one parallel region (`persistent_threads`) the rounding stage would
        need a barrier of its own, so there each use rounds its pair instead.

        The code calls `llvm.x86.avx512bf16.dpbf16ps.512` (through a small
        LLVM function linked into the module, see `cortex_tvm.dot_bf16`): it
        builds for any x86 target with the feature, but runs only on a CPU
        with AVX512_BF16 (Intel Cooper Lake, Sapphire Rapids and later; AMD
        Zen 4 and later); the build refuses a target without the feature.
        `compile(precision="bf16")` applies it by itself where the target has
        the feature (`recipes.for_target`), then `store_bf16()` for the
        weights left.

        Requires: the weight packed (pack, [tile, k, column] with an even k
        extent), float32, and every tiled GEMM reading it in the kernel tiled
        with 16 lanes, its innermost reduction loop of even extent, each
        update `acc += W_packed[a, k, c] * x` with x the same across the
        lanes; apply it after tile_gemm and parallel_columns (it splits off the
        reduction's init itself).  `weight` None: every packed float32
        weight the kernel reads that fits; ScheduleError when none does.
        With `round_once_only`, a weight fits only if each of its GEMMs rounds
        its state operand once per node (not ChildSum's forget gates, one
        product per child): on an AMX CPU (`amx_bf16`) a GEMM on `vdpbf16ps`
        that rounds at each use ran slower than float32 products of the
        stored bfloat16 weights (docs/benchmarks.md).

        Parameters
        ----------
        weight : str or None   a packed weight (e.g. "U"); None for every one that fits
        round_once_only : bool  only GEMMs whose state operand is rounded once per node fit

        Returns
        -------
        self

        Raises
        ------
        ScheduleError  a weight that is not packed, not read by a tiled GEMM of the kernel, stored as
                       bfloat16 already, or whose GEMM does not have the form above (the message
                       says which part, or that it rounds at each use with round_once_only);
                       None and no weight fits

        Examples
        --------
        Before (TreeLSTM H=256 after ``pack("U", tile=16, groups=5)`` and
        ``tile_gemm("gates_sum", node_tile=3, column_tile=16)``)::

            for i2_0 in T.parallel(16):                                     # column tiles
              for i0_0 in range(n // 3):                                    # node tiles
                for j, k_0 in T.grid(2, 32):
                  for k_1, i0_1, i1, i2_1_0 in T.grid(8, 3, 5, 1):          # unrolled
                    for i2_1_1 in T.vectorized(16):
                      with T.sblock("gates_sum"):                           # + its init
                        gates_sum[v_i0, v_i1, v_i2] += U_packed[v_i2 // 16, v_j * 256 + v_k,
                            v_i1 * 16 + v_i2 % 16] * h[children[level_offsets[v_1] + v_i0, v_j], v_k]

        ``rs.dot_bf16("U")``; after (U_packed: (16, 256, 80) uint32)::

            gates_sum_update_x_pairs = T.sblock_alloc_buffer((T.max(max_level_size, 64), 2, 128), "uint32")
            for n, r0, kp in T.grid(n, 2, 128):
              with T.sblock("gates_sum_update_x_pairs"):
                gates_sum_update_x_pairs[v_n, v_r0, v_kp] = bits(h[children[level_offsets[v_1] + v_n, v_r0], v_kp * 2])
                    | bits(h[children[level_offsets[v_1] + v_n, v_r0], v_kp * 2 + 1]) << T.uint32(16)
            for i2_0 in T.parallel(16):
              for i0_0 in range(n // 3):
                for j, k_0 in T.grid(2, 32):
                  for k_1_0, i0_1, i1, i2_1_0 in T.grid(4, 3, 5, 1):        # unrolled
                    T.attr(0, "pragma_import_llvm", <define @cortex_dpbf16ps ...>)
                    with T.sblock("gates_sum_update"):
                      gates_sum[nd, i1, T.Ramp(c, 1, 16)] = T.call_extern("float32x16", "cortex_dpbf16ps",
                          gates_sum[nd, i1, T.Ramp(c, 1, 16)],
                          T.Broadcast(T.reinterpret("int32", gates_sum_update_x_pairs[nd, j, k // 2]), 16),
                          T.reinterpret("int32x16", U_packed[i2_0, (j * 256 + k) // 2, T.Ramp(i1 * 16, 1, 16)]))

        with nd = i0_0 * 3 + i0_1, c = i2_0 * 16, k = k_0 * 8 + k_1_0 * 2, and in
        ``cortex_transform_params``::

            U_packed[a, kp, c] = bits(U[r, kp * 2]) | bits(U[r, kp * 2 + 1]) << T.uint32(16)

        where ``bits(x)`` rounds to bfloat16 (``(b + 0x7FFF + (b >> 16 & 1)) >> 16`` of the float's bits).
        """
        packs = {p[0]: p for p in self.plan.packs}
        in_kernel = {p.name: p for p in self.func.params}
        if weight is not None:
            if weight not in packs:
                raise ScheduleError(f"dot_bf16: {weight!r} is not packed; packed weights are {sorted(packs)}")
            if weight in self.plan.bf16_weights:
                raise ScheduleError(f"dot_bf16: {weight!r} is stored as bfloat16 already (apply dot_bf16 "
                                    "before store_bf16)")
            if packed_name(weight) not in in_kernel:
                raise ScheduleError(f"dot_bf16: the kernel does not read {weight!r} (only the parameter "
                                    "transform does: there is no GEMM of it to run in bfloat16)")
            chosen = [weight]
        else:
            chosen = [n for n in packs if packed_name(n) in in_kernel and n not in self.plan.bf16_weights]
        done, why = [], {}
        for name in chosen:
            saved = (self.sch.copy(), list(self._pending_decompose))
            try:
                self._dot_bf16_one(name, packs[name], round_once_only)
                done.append(name)
            except (_kernel.NotADot, ScheduleError, tvm.s_tir.ScheduleError) as err:
                if weight is not None:
                    raise ScheduleError(f"dot_bf16: {err}") from err
                why[name] = str(err)
                self.sch, self._pending_decompose = saved
                self.sch.work_on(FUNC_NAME)
        if not done:
            raise ScheduleError("dot_bf16: no packed weight fits: " + ("; ".join(f"{k}: {v}" for k, v in why.items())
                                                                       or "the kernel reads none"))
        self.plan = replace(self.plan, bf16_weights=self.plan.bf16_weights + tuple(done))
        return self

    @primitive
    def amx_bf16(self):
        """Run the GEMMs `dot_bf16` put on `vdpbf16ps` on Intel AMX tiles, 16 nodes at a time.

        `tdpbf16ps` multiplies a tile of up to 16 nodes x 16 state pairs by 16 weight pair rows x
        16 columns into 16 x 16 float32 accumulators (8192 multiply-adds, 256 `vdpbf16ps`' work), from the
        operands `dot_bf16` lays out (the weight's pairs, the state pairs rounded once per node).
        Each node loop of such a GEMM (tiled one node at a time) becomes blocks of up to 16 nodes:
        the tiles configured for the block's rows, the accumulators of every column vector of
        the tile in tile registers (six at a time), one state tile load per 16 pairs and one
        weight tile load and product per column vector, the tiles stored (through a tile on the
        stack, whose rows are copied: the build may shrink the accumulators' allocation to one
        column tile per thread, which would change a stride given to `tilestored`), then the
        epilogue per node.  Accumulation, rounding and the epilogue are dot_bf16's (float32 sums of products
        of bfloat16 values).  The code needs a CPU with AMX-BF16 (Intel Sapphire Rapids and
        later) and a Linux that grants the tile state (`cortex_tvm.amx_bf16.request_permission`,
        asked before the first call); the build refuses a target without it.
        `compile(precision="bf16")` applies it by itself where the target has AMX.

        Requires: dot_bf16 applied with its rounding stage (not with persistent_threads or
        unroll_recursion, nor for an operand that varies along another axis than the node:
        ChildSum's forget gates, one per child), the GEMM tiled with node_tile=1 (the node loop
        holds the init, the update and the epilogue), 16 lanes, and a reduction of a multiple
        of 16 pairs.  A GEMM that does not fit keeps `vdpbf16ps`; ScheduleError when none fits.

        Returns
        -------
        self

        Raises
        ------
        ScheduleError  no GEMM on vdpbf16ps, or none whose loops have the form above (the
                       message says which part)

        Examples
        --------
        Before (TreeLSTM H=256, ``tile_gemm("gates_sum", node_tile=1, column_tile=16)``, then
        ``dot_bf16()``)::

            for a in T.parallel(16):                                     # column tiles
              for n in range(level_size):
                gates_sum[n, 0:5, a * 16:a * 16 + 16] = 0                 # init
                for j, k_0 in T.grid(2, 32):
                  for k_1_0, g in T.grid(4, 5):                           # unrolled
                    gates_sum[n, g, T.Ramp(a * 16, 1, 16)] = T.call_extern("float32x16", "cortex_dpbf16ps",
                        gates_sum[n, g, T.Ramp(a * 16, 1, 16)], T.Broadcast(x_pairs[n, j, k // 2], 16),
                        U_packed[a, (j * 256 + k) // 2, T.Ramp(g * 16, 1, 16)])
                <epilogue of node n>

        ``rs.amx_bf16()``; after::

            for a in T.parallel(16):
              for amx_block in range((level_size + 15) // 16):
                amx_rows = T.min(16, level_size - amx_block * 16)
                with T.sblock("gates_sum_update_amx"):
                  amx_config = T.sblock_alloc_buffer((64,), "uint8", scope="local")
                  amx_tile = T.sblock_alloc_buffer((16, 16), scope="local")
                  <palette 1; tiles 0-6: amx_rows x 64 B; tile 7: 16 x 64 B>
                  T.call_llvm_intrin("void", "llvm.x86.ldtilecfg", T.address_of(amx_config[0]))
                  T.call_llvm_intrin("void", "llvm.x86.tilezero", T.uint8(g))             # g = 0..4
                  for amx_chunk in range(16):
                    T.call_llvm_intrin("void", "llvm.x86.tileloadd64", T.uint8(6),
                        T.address_of(x_pairs[amx_block * 16, amx_chunk // 8, amx_chunk % 8 * 16]), T.int64(1024))
                    T.call_llvm_intrin("void", "llvm.x86.tileloadd64", T.uint8(7),
                                       T.address_of(U_packed[a, amx_chunk * 16, g * 16]), T.int64(320))   # g = 0..4
                    T.call_llvm_intrin("void", "llvm.x86.tdpbf16ps", T.uint8(g), T.uint8(6), T.uint8(7))
                  T.call_llvm_intrin("void", "llvm.x86.tilestored64", T.uint8(g),     # g = 0..4
                                     T.address_of(amx_tile[0, 0]), T.int64(64))      # a stack tile
                  for amx_row in range(amx_rows):
                    gates_sum[amx_block * 16 + amx_row, g, T.Ramp(a * 16, 1, 16)] = amx_tile[amx_row, 0:16]
                for amx_node in range(amx_rows):
                  <epilogue of node amx_block * 16 + amx_node>
        """
        kernel = self.func
        pairs = [p for p in kernel.params if str(getattr(p, "dtype", "")) == _dot.PAIR_STORAGE]
        blocks = [b for b in self.tiled if _dot.has_block(kernel.body, f"{b}_update")]
        if not pairs or not blocks:
            raise ScheduleError("amx_bf16: no GEMM of the kernel runs on vdpbf16ps (apply dot_bf16 first)")
        # a GEMM that does not fit keeps vdpbf16ps, and so do its tails (level_tails' copies)
        done, why, kept = 0, [], set()
        for block in sorted(blocks, key=_tails.node_set):          # the whole tiles before the tails
            if _tails.copied_from(block) in kept:
                continue
            try:
                kernel, count = _amx.rewrite(kernel, f"{block}_update", pairs)
            except _amx.NotAmx as err:
                why.append(str(err))
                kept.add(_tails.copied_from(block))
                continue
            done += count
        if not done:
            raise ScheduleError("amx_bf16: " + ("; ".join(why) or f"no node loop of {blocks} holds its GEMM's "
                                               "init and update (tile_gemm with node_tile=1)"))
        self._replace(**{FUNC_NAME: kernel})
        self.plan = replace(self.plan, amx=True)
        return self

    def _dot_bf16_one(self, name, pack, round_once_only: bool = False):
        """dot_bf16 for one weight: split and reorder each tiled GEMM reading it (s_tir), then the
        TIR rewrites of the kernel and the transform (see cortex_tvm.dot_bf16)."""
        buffer = next(p for p in self.func.params if p.name == packed_name(name))
        if str(buffer.dtype) != "float32" or len(buffer.shape) != 3 or int(buffer.shape[1]) % 2:
            raise ScheduleError(f"{name!r}: its packed copy is {buffer.dtype} {tuple(buffer.shape)}, not float32 "
                                "[tile, k, column] with an even k extent")
        readers = [b for b in self.tiled if self._function_of(b) == FUNC_NAME and self._reads(b, buffer.name)]
        if not readers:
            raise ScheduleError(f"no tiled GEMM of the kernel reads {name!r} (apply tile_gemm first)")
        updates = []
        for block in readers:
            position = next((pos for b, pos in self._pending_decompose if b == block), None)
            if position is None:
                raise ScheduleError(f"{block!r}: its reduction is not the one tile_gemm left")
            b = self._block(block)
            self.sch.decompose_reduction(b, self.sch.get_loops(b)[position])
            self._pending_decompose = [(x, p) for x, p in self._pending_decompose if x != block]
            update = f"{block}_update"
            self._pair_loop_inside_lanes(update)
            updates.append(update)
        kernel = self.func
        pairs = tvm.tirx.decl_buffer((int(buffer.shape[0]), int(buffer.shape[1]) // 2, int(buffer.shape[2])),
                                     _dot.PAIR_STORAGE, name=buffer.name, data_alignment=4)
        # the states' pairs rounded once per node, in a stage before the GEMM, unless the level
        # runs as one parallel region (persistent_threads, unroll_recursion's chunks), where that
        # stage would need a barrier of its own: then each use rounds its pair
        round_once = not self.persistent_levels and self.plan.recursion_depth <= 1
        for update in updates:
            kernel, count = _kernel.rewrite_updates(kernel, update, buffer, pairs, round_once)
            if not count:
                raise ScheduleError(f"{update!r}: no {_dot.LANES}-lane x pair loop nest to rewrite")
            if round_once_only and not _dot.has_block(kernel.body, f"{update}_x_pairs"):
                raise ScheduleError(f"{update!r} rounds its state operand at each use (it varies along another "
                                    "axis than the node, or the level runs as one parallel region), and "
                                    "round_once_only is set")
        kernel = _dot.widen_reads(kernel, buffer, pairs)
        _, axis, tile, groups, extent = pack
        transform = _dot.pack_pairs(self.transform_func, name, packed_name(name),
                                    tir_rewrites.untile_axis(axis, tile, groups, extent))
        self._replace(**{FUNC_NAME: kernel, TRANSFORM_FUNC: transform})

    def _pair_loop_inside_lanes(self, update):
        """Split the innermost reduction loop of `update` by 2 and move the pair loop inside its
        (vectorized, 16-lane) innermost loop."""
        sch = self.sch
        b = self._block(update)
        loops = sch.get_loops(b)
        lane = sch.get(loops[-1])
        if lane.kind != tvm.tirx.ForKind.VECTORIZED or not isinstance(lane.extent, tvm.tirx.IntImm) \
                or lane.extent.value != _dot.LANES:
            raise ScheduleError(f"{update!r}: its innermost loop is not {_dot.LANES} vectorized lanes "
                                f"(tile_gemm lanes={_dot.LANES})")
        realize = []
        tvm_ffi.structural_walk(self.func, (tvm.s_tir.stmt.SBlockRealize,
                                            lambda r: realize.append(r) if r.block.name_hint == update else None))
        reduce_vars = [value for iv, value in zip(realize[0].block.iter_vars, realize[0].iter_values)
                       if iv.iter_type == _REDUCE]
        reducing = [loop for loop in loops
                    if any(uses(value, sch.get(loop).loop_var) for value in reduce_vars)]
        if not reducing:
            raise ScheduleError(f"{update!r} has no reduction loop")
        inner = reducing[-1]
        extent = sch.get(inner).extent
        if not isinstance(extent, tvm.tirx.IntImm) or extent.value % 2:
            raise ScheduleError(f"{update!r}: its innermost reduction loop has extent {extent}, not an even "
                                "number (k_unroll of tile_gemm odd, or an odd reduction)")
        unrolled = sch.get(inner).kind == tvm.tirx.ForKind.UNROLLED
        between = loops[loops.index(inner) + 1:-1]
        outer, pair = sch.split(inner, [None, 2])
        if unrolled:
            sch.unroll(outer)
        sch.reorder(*between, loops[-1], pair)
