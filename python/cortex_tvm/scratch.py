"""Arrays kept between calls, so that a training step does not page-fault on fresh memory.

A float32 array that numpy allocates afresh is mapped lazily: its first write to each 4 KB page
costs a page fault, which on a VM costs microseconds.  A TreeLSTM h=150 training step at batch
25 touches some megabytes that way (the gradients, the embedding's among them, the adjoints of
the states), and its faults cost more than a millisecond (Zen 4 VM, `docs/training.md`).  Two
kinds of arrays avoid that:

* `held_rows`: a working array that never leaves the library (the backward's values and
  adjoints), kept per key and grown by doubling;
* `Recycled`: arrays handed to the caller (the gradients), taken back at the next call only
  once nothing but this pool refers to them.  An array that the caller still holds, directly,
  through a view (its ``.base``), a torch tensor from ``torch.from_numpy`` or a DLPack capsule,
  is never reused: a new one is made and the old one stays the caller's::

      pool = Recycled()
      g = pool.zeros("U", (4, 4)); g += 1
      del g                                   # the caller lets go
      pool.zeros("U", (4, 4)).sum()           # 0.0: the same memory, zeroed again
"""
from __future__ import annotations

import ctypes
import sys
import threading

import numpy as np

#: sys.getrefcount of a pooled array that nothing outside `Recycled.zeros` refers to: the
#: pool's dict, the function's local name, and getrefcount's own argument
_ONLY_THE_POOL = 3


def held_rows(held: dict, key, count: int, row_shape) -> np.ndarray:
    """The first `count` rows of the float32 array `held[key]`, kept between calls and grown by
    doubling, at least to `count` (a batch's node count changes from call to call); a new
    row shape starts a new array."""
    row_shape = tuple(row_shape)
    array = held.get(key)
    if array is not None and array.shape[1:] != row_shape:
        array = None
    if array is None or array.shape[0] < count:
        # (at least a row: numpy gives an array of no rows strides of 0, which TVM's calls refuse as
        # not compact; a view of none of a row keeps the row's strides)
        grown = max(1, count if array is None else max(count, 2 * array.shape[0]))
        array = held[key] = np.empty((grown,) + row_shape, np.float32)
    return array[:count]


def aligned_zeros(shape, line: int = 64) -> np.ndarray:
    """A float32 array of zeros whose first element starts on a `line`-byte boundary (numpy's
    own start 16 bytes into a line): a row of a multiple of `line` bytes then starts on one too,
    which a compiled loop's vector loads need to stay inside a line (`adjoint_copies.Transposed`)."""
    count = int(np.prod(shape))
    raw = np.zeros(count + line // 4, np.float32)
    start = (-raw.ctypes.data % line) // 4
    return raw[start:start + count].reshape(shape)


def zero(array: np.ndarray) -> None:
    """array[...] = 0; a contiguous one by libc's memset, about twice as fast as numpy's
    fill for the megabytes of a training step's arrays."""
    if array.flags.c_contiguous and array.flags.writeable:
        ctypes.memset(array.ctypes.data, 0, array.nbytes)
    else:
        array.fill(0)


class Recycled:
    """Zeroed arrays by key, per thread, reusing the last one of a key when its caller has let
    go of it (see the module docstring)."""

    def __init__(self):
        self._local = threading.local()

    def zeros(self, key, shape, dtype=np.float32) -> np.ndarray:
        return self._take(key, shape, dtype, True)

    def empty(self, key, shape, dtype=np.float32) -> np.ndarray:
        """`zeros` without the zeroing, for a caller that writes every element before it reads
        one (a compiled sum that starts from its first block of nodes)."""
        return self._take(key, shape, dtype, False)

    def _take(self, key, shape, dtype, zeroed: bool) -> np.ndarray:
        pool = self._local.__dict__.setdefault("arrays", {})
        clean = self._local.__dict__.setdefault("clean", set())
        was_clean = key in clean
        clean.discard(key)
        array = pool.get(key)
        if (array is not None and array.shape == tuple(shape) and array.dtype == dtype
                and sys.getrefcount(array) <= _ONLY_THE_POOL):
            if zeroed and not was_clean:
                zero(array)
            return array
        array = pool[key] = (np.zeros if zeroed else np.empty)(shape, dtype)
        return array

    def zeroed(self, key) -> None:
        """The caller has zeroed again every element it wrote of the array `zeros(key, ...)` last
        gave it and lets go of it: the next `zeros(key, ...)` on this thread skips the memset (an
        embedding's gradient, of which a batch writes a few rows of megabytes)."""
        self._local.__dict__.setdefault("clean", set()).add(key)
