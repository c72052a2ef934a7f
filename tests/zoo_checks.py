"""Checks of a compiled zoo model (conftest's `Zoo`) against the float64 numpy reference
(tests/reference.py), shared by the test_models_*.py files."""
import numpy as np

import reference as ref

TOL = 1e-4


def assert_close(got, want, tol=TOL):
    """`got` is a finite float32 array of `want`'s shape, within `tol` of it everywhere."""
    got = np.asarray(got)
    assert got.dtype == np.float32
    assert got.shape == np.shape(want), (got.shape, np.shape(want))
    assert np.all(np.isfinite(got))
    err = float(np.max(np.abs(got.astype(np.float64) - want))) if got.size else 0.0
    assert err <= tol, f"max abs diff {err:g} > {tol:g}"


def check_roots(z, trees):
    """Run the compiled model on `trees` and check its roots against the reference; returns them."""
    got = z.compiled(trees)
    assert isinstance(got, np.ndarray)
    assert_close(got, ref.roots(z.name, trees, z.weights))
    return got


#: model name -> reference roots of the SST trees (the slowest reference: computed once per session)
_sst_ref = {}


def sst_reference(z, trees):
    """The reference roots of the SST trees `trees` for `z`'s model, cached by model name."""
    if z.name not in _sst_ref:
        _sst_ref[z.name] = ref.roots(z.name, trees, z.weights)
    return _sst_ref[z.name]
