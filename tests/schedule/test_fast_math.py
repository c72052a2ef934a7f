"""fast_math: float32 exp/sigmoid/tanh become polynomial forms that vectorize."""
import numpy as np
import pytest
import tvm
import tvm_ffi
from tvm import te

import cortex_tvm as ct
from cortex_tvm import fast_math

from .irutil import calls, trace_names


def lets(node):
    found = []
    tvm_ffi.structural_walk(node, (tvm.tirx.Let, found.append), order="pre")
    return found


@pytest.mark.parametrize("name, ops", [("TreeLSTM", {"sigmoid", "tanh"}), ("TreeFC", {"tanh"})])
def test_ir_before_and_after(fresh, name, ops):
    rs = fresh(name).specialize_leaves()
    for op in ops:
        assert calls(rs.func, f"tirx.{op}"), op
    assert not calls(rs.func, "reinterpret")
    assert rs.fast_math() is rs
    func = rs.func
    for op in ("sigmoid", "tanh", "exp"):
        assert not calls(func, f"tirx.{op}"), op
    # 2^n built in the exponent bits
    assert calls(func, "reinterpret") and "127 << 23" in rs.show()
    assert calls(func, "floor")
    assert {let.var.name for let in lets(func)} == {"exp_x", "exp_n", "exp_r"}
    assert trace_names(rs) == ["specialize_leaves", "fast_math"]
    # applying it again changes nothing (no calls are left)
    again = rs.fast_math().func
    tvm.ir.assert_structural_equal(again, func)


def test_only_float32_calls_are_rewritten():
    x64 = tvm.tirx.Var("x", "float64")
    x32 = tvm.tirx.Var("y", "float32")
    f = tvm.tirx.PrimFunc([x64, x32], tvm.tirx.Evaluate(tvm.tirx.sigmoid(x64) + tvm.tirx.Cast("float64",
                                                                                              tvm.tirx.exp(x32))))
    out = fast_math.rewrite(f)
    assert calls(out, "tirx.sigmoid") and not calls(out, "tirx.exp")


def _compile_unary(fn):
    n = te.var("n")
    a = te.placeholder((n,), "float32", name="a")
    b = te.compute((n,), lambda i: fn(a[i]), name="b")
    return tvm.compile(te.create_prim_func([a, b]), target="llvm")


@pytest.fixture(scope="module")
def kernels():
    return {name: _compile_unary(getattr(fast_math, f"fast_{name}")) for name in ("exp", "sigmoid", "tanh")}



def _call(kernel, x):
    out = np.empty_like(x)
    try:
        f = kernel["main"]
    except Exception:   # noqa: BLE001 - the symbol name depends on the TVM version
        f = kernel["default_function"]
    f(x, out)
    return out


def test_fast_sigmoid_tanh_against_numpy(kernels):
    x = np.linspace(-20, 20, 200001, dtype=np.float32)
    x64 = x.astype(np.float64)
    sig = _call(kernels["sigmoid"], x)
    tanh = _call(kernels["tanh"], x)
    # the bound fast_math.py states (measured: 8.9e-8 and 1.8e-7)
    assert np.max(np.abs(sig - 1 / (1 + np.exp(-x64)))) < 3e-7
    assert np.max(np.abs(tanh - np.tanh(x64))) < 3e-7
    # far outside: saturated, finite
    big = np.array([-1e30, -200, -90, 90, 200, 1e30], np.float32)
    np.testing.assert_allclose(_call(kernels["sigmoid"], big), [0, 0, 0, 1, 1, 1], atol=1e-6)
    np.testing.assert_allclose(_call(kernels["tanh"], big), [-1, -1, -1, 1, 1, 1], atol=1e-6)


def test_fast_exp_relative_error(kernels):
    x = np.linspace(-80, 80, 100001, dtype=np.float32)
    got = _call(kernels["exp"], x).astype(np.float64)
    want = np.exp(x.astype(np.float64))
    assert np.max(np.abs(got - want) / want) < 2 * 2.0 ** -23       # ~2 ulp, as stated (measured: 7.7e-8)
    np.testing.assert_array_equal(_call(kernels["exp"], np.zeros(4, np.float32)), np.ones(4, np.float32))


@pytest.mark.parametrize("name", ["TreeLSTM", "TreeFC"])
def test_same_numbers(check_numbers, batches, name):
    fast = check_numbers(name, lambda rs: (rs.specialize_leaves(), rs.fast_math(), rs.vectorize_block("leaf_h")))
    libm = check_numbers(name, lambda rs: (rs.specialize_leaves(), rs.vectorize_block("leaf_h")))
    for batch in batches:
        np.testing.assert_allclose(fast(batch), libm(batch), atol=2e-6, rtol=0)
