"""numpy's BLAS held to one thread while the backward runs (`single_threaded_blas`).

The backward's matrix products go through numpy, whose OpenBLAS keeps a pool of threads that
spin while they wait; so do TVM's pool (the forward kernel) and PyTorch's (the optimizer).  On a
machine whose cores they share, a spinning pool slows the others several times over (20 ms
instead of 3 for one product here, measured inside a training step).  One BLAS thread runs on
the calling thread and leaves no pool spinning.  The library is found the way threadpoolctl
does it: among the shared objects mapped into the process, through its exported setter.
"""
from __future__ import annotations

import contextlib
import ctypes
import os

import numpy  # noqa: F401 - its BLAS must be loaded to be found

#: (getter, setter) names of OpenBLAS builds: numpy's own wheels (scipy-openblas), plain builds
_SYMBOLS = (("scipy_openblas_get_num_threads64_", "scipy_openblas_set_num_threads64_"),
            ("scipy_openblas_get_num_threads", "scipy_openblas_set_num_threads"),
            ("openblas_get_num_threads64_", "openblas_set_num_threads64_"),
            ("openblas_get_num_threads", "openblas_set_num_threads"))
_found = []


def _openblas():
    """(get, set) of the OpenBLAS numpy loaded, or None (another BLAS, or no /proc)."""
    if not _found:
        _found.append(None)
        try:
            with open("/proc/self/maps", encoding="utf-8") as maps:
                paths = sorted({line.split()[-1] for line in maps if "openblas" in line.lower()
                                and os.path.sep in line})
        except OSError:
            paths = []
        for path in paths:
            try:
                lib = ctypes.CDLL(path)
            except OSError:
                continue
            for get, put in _SYMBOLS:
                if hasattr(lib, get) and hasattr(lib, put):
                    _found[0] = (getattr(lib, get), getattr(lib, put))
                    break
            if _found[0]:
                break
    return _found[0]


@contextlib.contextmanager
def single_threaded_blas():
    """numpy's OpenBLAS on one thread inside the block, as it was after (a no-op elsewhere)."""
    blas = _openblas()
    if blas is None:
        yield
        return
    get, put = blas
    before = get()
    put(1)
    try:
        yield
    finally:
        put(before)
