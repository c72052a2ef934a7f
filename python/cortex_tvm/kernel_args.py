"""The arguments of a compiled kernel and its launch (deploy side, numpy only): cache-line
aligned arrays, the weight arguments made by the module's parameter transforms, and the call of
one kernel or of the per-level ones."""
from __future__ import annotations

import numpy as np

from .plan import TRANSFORM_FUNC

#: bytes every array the kernel reads is aligned to: a cache line, so no vector load of a
#: packed weight row straddles two lines (numpy alone aligns to 16 bytes; a 32-byte load at a
#: 48-byte offset splits on every other load, which cost 20-25% of TreeLSTM H=256 here)
ALIGN = 64


def aligned_empty(shape, dtype) -> np.ndarray:
    """An uninitialized C-contiguous array whose data starts on an ALIGN-byte boundary."""
    dtype = np.dtype(dtype)
    count = int(np.prod(shape, dtype=np.int64))
    raw = np.empty(count * dtype.itemsize + ALIGN, np.uint8)
    start = -raw.ctypes.data % ALIGN
    return raw[start:start + count * dtype.itemsize].view(dtype).reshape(shape)


def aligned_copy(array, dtype=None) -> np.ndarray:
    """A C-contiguous, ALIGN-byte aligned copy of `array` (as `dtype`), made in one pass."""
    array = np.asarray(array)
    out = aligned_empty(array.shape, dtype or array.dtype)
    out[...] = array
    return out


def aligned(array) -> np.ndarray:
    """`array` itself when C-contiguous and aligned, else an aligned copy."""
    array = np.asarray(array)
    if array.flags.c_contiguous and array.ctypes.data % ALIGN == 0:
        return array
    return aligned_copy(array)


def kernel_weights(executable, signature, model_weights: dict, put=aligned) -> list:
    """The kernel's weight arguments from the model's weights (name -> array, model layout).

    With parameter transforms (`hoist`'s tables, `pack`'s layouts) the module's
    `cortex_transform_params` computes them, once, on the target, from the model's weights;
    the other weights pass through.  `put` places an array (e.g. on a device).
    """
    produced = {}
    if signature.transform:
        args = []
        for name, shape, dtype, written in signature.transform:
            array = put(aligned_empty(shape, dtype) if written else model_weights[name])
            if written:
                produced[name] = array
            args.append(array)
        executable[TRANSFORM_FUNC](*args)
    return [produced[name] if name in produced else put(model_weights[name]) for name, _, _ in signature.weights]


def model_weight_arrays(model, signature) -> dict:
    """The model's weights the kernel needs (`signature.model_weights`), as float copies:
    the model's later edits stay out."""
    return {name: aligned_copy(model.weights[name], dtype)
            for name, _, dtype in signature.model_weights()}


def launch(functions, args, lin, signature, plan):
    """Run the kernel(s): one call, or leaves + one call per level + roots (`per_level_kernels`)."""
    if plan.per_level:
        leaves, level_fn, roots = functions
        leaves(*args)
        for level in range(signature.first_level, lin.num_levels):
            level_fn(*args, level)
        roots(*args)
    else:
        functions[0](*args)
