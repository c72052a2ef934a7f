"""Primitives that change data layout or index expressions (TIR rewrites)."""
from __future__ import annotations

from dataclasses import replace

import tvm
import tvm_ffi

from .. import dot_bf16 as _dot
from .. import fast_math as _fast_math
from .. import level_tails as _tails
from .. import passes
from ..lower import FUNC_NAME, TRANSFORM_FUNC
from .core import REDUCE as _REDUCE
from .core import ScheduleError, primitive

def packed_name(weight: str) -> str:
    """The kernel parameter holding a packed weight (the transform function writes it)."""
    return f"{weight}_packed"


#: dense scratchpads keep at least this many rows, so node tiles up to this size
#: compact to constant-size (register) buffers
MIN_DENSE_ROWS = 64


class LayoutPrimitives:

    @primitive
    def pack(self, weight: str, axis: int = 0, tile: int = 64, groups: int = 1):
        """Repack a weight so `tile` consecutive rows along `axis` become the innermost dimension.

        `W[r, c]` becomes `W[r // tile, c, r % tile]`: a vector of `tile` outputs
        is read from contiguous memory for each reduction index.  With
        `groups=G` the rows are G blocks (an LSTM's gates) and a tile holds
        `tile` rows of every block side by side, so one register tile computes
        all gates of the same hidden units.  The kernel reads the packed copy
        `<weight>_packed`, which the module's parameter transform function
        (`cortex_transform_params`, see `hoist`) writes from the weight once,
        when the model is compiled or loaded: the layout is TIR, built for the
        same target, not a numpy step beside it.

        Requires: `weight` is a weight parameter, only read;
        `shape[axis] % (groups * tile) == 0`.

        Parameters
        ----------
        weight : str   name of the weight parameter (e.g. "U")
        axis : int     the dimension to tile (the output dimension of y = W x)
        tile : int     rows per tile (per group)
        groups : int   row blocks interleaved in each tile

        Returns
        -------
        self

        Raises
        ------
        ScheduleError  unknown weight, bad axis or tile, or a weight that is written

        Examples
        --------
        Before::

            gates_sum[n, r] += U[r, j * 256 + k] * h[children[n, j], k]     # U: (1280, 512)

        ``rs.pack("U", axis=0, tile=64)``; after::

            gates_sum[n, r] += U_packed[r // 64, j * 256 + k, r % 64] * h[children[n, j], k]  # (20, 512, 64)

        and in ``cortex_transform_params(U, U_packed)``::

            for a, c, b in T.grid(20, 512, 64):
                with T.sblock("pack_U"): U_packed[a, c, b] = U[a * 64 + b, c]

        With gates as gates[n, g, i] (row g * 256 + i), ``rs.pack("U", tile=16, groups=5)``::

            gates_sum[n, g, i] += U_packed[i // 16, j * 256 + k, g * 16 + i % 16] * ...     # (16, 512, 80)
        """
        # a weight is packable in the model's layout (the transform's input, or a kernel weight
        # no transform produces); tables and packed copies are outputs, not weights
        weights = {name: (name, shape, dtype) for name, shape, dtype in self.signature.model_weights()}
        if weight not in weights:
            raise ScheduleError(f"pack: {weight!r} is not a weight; weights are {sorted(weights)}")
        if any(p[0] == weight for p in self.plan.packs):
            raise ScheduleError(f"pack: {weight!r} is already packed")
        spec = weights[weight]
        in_kernel = weight in {p.name for p in self.func.params}
        shape = list(spec[1])
        if not 0 <= axis < len(shape):
            raise ScheduleError(f"pack: axis {axis!r} out of range for {weight!r} of shape {tuple(shape)}")
        if groups < 1:
            raise ScheduleError(f"pack: groups must be a positive int, got {groups!r}")
        if tile < 1 or shape[axis] % (tile * groups):
            raise ScheduleError(f"pack: tile {tile!r} x groups {groups} does not divide "
                                f"{weight!r}.shape[{axis}] = {shape[axis]}")
        index_fn = passes.tile_axis(axis, tile, groups, shape[axis])
        inverse_fn = passes.untile_axis(axis, tile, groups, shape[axis])
        packed = packed_name(weight)
        try:
            functions = {TRANSFORM_FUNC: passes.add_pack(self.transform_func, spec, packed, index_fn, inverse_fn,
                                                         TRANSFORM_FUNC)}
            if in_kernel:
                functions[FUNC_NAME] = passes.pack_buffer(self.func, weight, index_fn, packed)
        except ValueError as err:
            raise ScheduleError(f"pack: {err}") from err
        self._replace(**functions)
        self.plan = self.plan.with_pack(weight, axis, tile, groups, shape[axis])
        return self

    @primitive
    def dense_index(self, tensor: str):
        """Index a scratchpad by position in the level instead of by node id (non-affine -> affine).

        Requires: `tensor` is a scratchpad (a per-node intermediate) still indexed
        as `tensor[level_offsets[l] + j, ...]`.

        Parameters
        ----------
        tensor : str   the scratchpad's name (the RA compute's name, e.g. "gates")

        Returns
        -------
        self

        Raises
        ------
        ScheduleError  unknown scratchpad, or one already dense

        Examples
        --------
        Before (allocation: every slot)::

            gates = T.sblock_alloc_buffer((num_slots, 1280))
            gates[level_offsets[l] + j, r] = gates_sum[level_offsets[l] + j, r] + bU[r]

        ``rs.dense_index("gates")``; after (allocation: the largest level)::

            gates = T.sblock_alloc_buffer((T.max(max_level_size, 64), 1280))
            gates[j, r] = gates_sum[level_offsets[l] + j, r] + bU[r]
        """
        if passes.find_alloc(self.func, tensor) is None:
            raise ScheduleError(f"dense_index: no scratchpad named {tensor!r}; scratchpads are "
                                f"{self.scratchpads()}")
        max_level_size = passes.param(self.func, "max_level_size")
        self._rewrite(lambda f: passes.dense_index(f, tensor, max_level_size, MIN_DENSE_ROWS))
        return self

    def scratchpads(self) -> list:
        """Names of the kernel's per-node intermediate buffers (the transform function's are
        indexed by word from the start, a level tail's by its place in the tail: dense already)."""
        names = []

        def on_block(b):
            names.extend(buf.name for buf in b.alloc_buffers if not _tails.node_set(buf.name))
        tvm_ffi.structural_walk(self.func, (tvm.s_tir.stmt.SBlock, on_block), order="pre")
        return names

    @primitive
    def fast_math(self):
        """Replace float32 exp/sigmoid/tanh by polynomial forms that vectorize.

        TVM calls scalar libm for these on CPU, which keeps an LSTM epilogue
        from vectorizing.  Accuracy: within 3e-7 absolute of numpy.

        Examples
        --------
        Before: ``c[n, i] = T.sigmoid(g[n, i]) * T.tanh(g[n, i + 768])``;
        ``rs.fast_math()``; after: the same expression with each call replaced
        by clamps, a degree-6 polynomial and an exponent built with
        ``T.reinterpret("float32", T.shift_left(n + 127, 23))``.
        """
        self._rewrite(_fast_math.rewrite, functions=(FUNC_NAME, TRANSFORM_FUNC))
        return self

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
                        functions[fname] = passes.store_bf16(func, packed_name(name))
                    except ValueError as err:
                        raise ScheduleError(f"store_bf16: {err}") from err
        self._replace(**functions)
        self.plan = replace(self.plan, bf16_weights=self.plan.bf16_weights + tuple(chosen))
        return self

    @primitive
    def dot_bf16(self, weight: str | None = None):
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

        Parameters
        ----------
        weight : str or None   a packed weight (e.g. "U"); None for every one that fits

        Returns
        -------
        self

        Raises
        ------
        ScheduleError  a weight that is not packed, not read by a tiled GEMM of the kernel, stored as
                       bfloat16 already, or whose GEMM does not have the form above (the message
                       says which part); None and no weight fits

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
                self._dot_bf16_one(name, packs[name])
                done.append(name)
            except (_dot.NotADot, ScheduleError, tvm.s_tir.ScheduleError) as err:
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

    def _dot_bf16_one(self, name, pack):
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
            kernel, count = _dot.rewrite_updates(kernel, update, buffer, pairs, round_once)
            if not count:
                raise ScheduleError(f"{update!r}: no {_dot.LANES}-lane x pair loop nest to rewrite")
        kernel = _dot.widen_reads(kernel, buffer, pairs)
        _, axis, tile, groups, extent = pack
        transform = _dot.pack_pairs(self.transform_func, name, packed_name(name),
                                    passes.untile_axis(axis, tile, groups, extent))
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
                    if any(_dot._uses(value, sch.get(loop).loop_var) for value in reduce_vars)]
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
