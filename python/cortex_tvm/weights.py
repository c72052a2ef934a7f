"""Weights as users hand them in: numpy arrays or torch tensors, validated into float32 copies.

Shared by the models (`load_weights`) and by `load` of an exported model, so both accept the
same inputs and reject the same mistakes with the same messages.
"""
from __future__ import annotations

import numpy as np

from .blas_threads import single_threaded_blas


def from_torch(value):
    """A torch tensor as a numpy array (detached, on the CPU); anything else as it is (torch is
    optional: nothing here imports it)."""
    if hasattr(value, "detach") and hasattr(value, "cpu"):       # a torch.Tensor
        return value.detach().cpu().numpy()
    return value


def to_numpy(name, value):
    """numpy array from a numpy array or a torch tensor (torch is optional)."""
    value = from_torch(value)
    if not isinstance(value, np.ndarray):
        raise TypeError(f"weight {name!r}: expected a numpy array or torch tensor, got {type(value).__name__}")
    return value


#: the size below which `all_finite` tests elements (OpenBLAS's dot runs on one thread there anyway)
SMALL = 4096


def all_finite(array: np.ndarray) -> bool:
    """Whether every element is finite.  A float array's dot product with itself is finite
    only if every element is (NaN and infinity propagate), in one pass without numpy's boolean
    temporary (half the time for a 26 MB embedding table in a probe); an overflow of finite values falls
    back to the element test.  An array below `SMALL` elements takes the element test at once: the dot's
    two context managers cost more than it (a bias vector in every training step)."""
    if array.size < SMALL:
        return bool(np.isfinite(array).all())
    if array.dtype.kind == "f":
        flat = array.reshape(-1)
        # one BLAS thread: the pool's would spin on the cores the kernel runs on next (blas_threads)
        with np.errstate(over="ignore", invalid="ignore"), single_threaded_blas():
            if np.isfinite(np.dot(flat, flat)):
                return True
    return bool(np.all(np.isfinite(array)))


def checked_weights(weights, expected: dict, aliases: dict, who: str, copy: bool = True,
                    rows_later=()) -> dict:
    """Validated float copies of `weights` (numpy arrays or torch tensors, names or aliases);
    copy=False: the arrays themselves where they are C-contiguous (a torch tensor's memory).

    expected: name -> (shape, dtype).  ValueError for missing, extra, wrongly
    shaped or non-finite weights; TypeError for a non-dict or a wrong dtype.  rows_later: the
    tables whose values are not checked here, as the caller checks the rows each batch reads
    (`check_rows`) before it runs: an embedding's cost then grows with the batch, not with the
    vocabulary, at every optimizer step.
    """
    if not hasattr(weights, "items"):
        raise TypeError(f"{who}: expected a dict of arrays, got {type(weights).__name__}")
    given = {aliases.get(k, k): v for k, v in weights.items()}
    missing, extra = sorted(set(expected) - set(given)), sorted(set(given) - set(expected))
    if missing:
        raise ValueError(f"{who}: missing weights {missing} (expected {sorted(expected)})")
    if extra:
        raise ValueError(f"{who}: unexpected weights {extra} (expected {sorted(expected)})")
    out = {}
    for name, (shape, dtype) in expected.items():
        w = to_numpy(name, given[name])
        if w.dtype != np.dtype(dtype):
            raise TypeError(f"{who}: weight {name!r}: dtype {w.dtype}, expected {dtype} "
                            f"(use .astype(np.{dtype}))")
        if tuple(w.shape) != tuple(shape):
            raise ValueError(f"{who}: weight {name!r}: shape {tuple(w.shape)}, expected {tuple(shape)}")
        if name not in rows_later:
            check_finite(name, w, who)
        # later edits by the caller do not leak in, unless it shares them (copy=False)
        out[name] = np.array(w, order="C", copy=True) if copy else np.ascontiguousarray(w)
    return out


def check_finite(name: str, array: np.ndarray, who: str) -> None:
    """ValueError naming the weight `name` unless every element of `array` is finite."""
    if not all_finite(array):
        raise ValueError(f"{who}: weight {name!r}: contains NaN or infinity")


def mark_finite(tensor) -> None:
    """Record that `tensor` (a torch tensor) holds only finite values as it is now: a compiled update
    found them so as it wrote them (`optim.Adagrad`).  The mark names the tensor's memory and torch's
    count of its changes (`_version`): any later in-place change, by torch's count, voids it; an edit that
    torch does not count (through `.data`, or a numpy view of its memory) keeps the mark, and goes
    unchecked."""
    tensor.__dict__["_cortex_finite_at"] = (tensor.data_ptr(), tensor._version)


def marked_finite(tensor) -> bool:
    """Whether `tensor` holds the values `mark_finite` last recorded finite, unchanged since: the
    compiled model's hand-over (`as_torch`) then need not check them again."""
    return tensor.__dict__.get("_cortex_finite_at") == (tensor.data_ptr(), tensor._version)


def check_rows(tables: dict, rows: dict, who: str, names) -> None:
    """ValueError naming the first row that holds a NaN or an infinity among the rows `rows[name]`
    (row numbers, e.g. the words a batch reads; None: every row) of each table `tables[name]`
    whose name is in `names`."""
    for name in names:
        index = rows[name]
        read = tables[name] if index is None else tables[name][index]
        if not all_finite(read):
            first = np.flatnonzero(~np.isfinite(read.reshape(len(read), -1)).all(axis=1))[0]
            raise ValueError(f"{who}: weight {name!r}: row {int(first if index is None else index[first])}"
                             + ("" if index is None else ", read by this batch,") + " contains NaN or infinity")


def pad_blocks(array, padding) -> np.ndarray:
    """`array` with zero padding per axis: `padding` lists (axis, blocks, size, padded_size), the
    axis being `blocks` blocks of `size` each widened to `padded_size` (`padding.padded`)."""
    for axis, blocks, size, padded_size in padding:
        shape = array.shape
        split = array.reshape(shape[:axis] + (blocks, size) + shape[axis + 1:])
        widths = [(0, 0)] * split.ndim
        widths[axis + 1] = (0, padded_size - size)
        array = np.pad(split, widths).reshape(shape[:axis] + (blocks * padded_size,) + shape[axis + 1:])
    return np.ascontiguousarray(array)


def unpadded_shape(shape, padding) -> tuple:
    """The shape a weight has before `pad_blocks(array, padding)`."""
    shape = list(shape)
    for axis, blocks, size, _ in padding:
        shape[axis] = blocks * size
    return tuple(shape)
