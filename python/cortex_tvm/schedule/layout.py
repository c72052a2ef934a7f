"""Primitives that change data layout or index expressions (TIR rewrites): pack, dense_index,
fast_math; the bfloat16 weights' are `bf16.py`'s."""
from __future__ import annotations

import tvm
import tvm_ffi

from .. import fast_math as _fast_math
from .. import level_tails as _tails
from .. import tir_rewrites
from ..lower import FUNC_NAME, TRANSFORM_FUNC
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
        index_fn = tir_rewrites.tile_axis(axis, tile, groups, shape[axis])
        inverse_fn = tir_rewrites.untile_axis(axis, tile, groups, shape[axis])
        packed = packed_name(weight)
        try:
            functions = {TRANSFORM_FUNC: tir_rewrites.add_pack(self.transform_func, spec, packed, index_fn, inverse_fn,
                                                         TRANSFORM_FUNC)}
            if in_kernel:
                functions[FUNC_NAME] = tir_rewrites.pack_buffer(self.func, weight, index_fn, packed)
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
        if tir_rewrites.find_alloc(self.func, tensor) is None:
            raise ScheduleError(f"dense_index: no scratchpad named {tensor!r}; scratchpads are "
                                f"{self.scratchpads()}")
        max_level_size = tir_rewrites.param(self.func, "max_level_size")
        self._rewrite(lambda f: tir_rewrites.dense_index(f, tensor, max_level_size, MIN_DENSE_ROWS))
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
