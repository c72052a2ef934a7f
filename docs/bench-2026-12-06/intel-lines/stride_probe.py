# What slows the level pass's register tile against the same tile alone (panel_probe.py in ../intel-inplace/panel-probe):
# the weight's row stride (argv[2] floats; the pass's U_T rows were 750 = 3000 bytes, 7 of 8 rows starting inside a
# cache line, against 768 = 3072 in the probe), and the tile's broadcast rows (argv[3] "perm": 8 rows at random
# places, as the pass's children's rows, against 8 consecutive).  The tile as panel_probe's: 8 nodes x 32 columns,
# summed over K = 300, C = 736 columns (23 whole chunks) of the (K, S) weight; N = argv[1] nodes.  GFLOP/s of
# out = a[perm] @ w[:, :C], best of 50 calls; TVM_NUM_THREADS as set (1 or 2).
import os, re, sys, time
os.environ.setdefault("TVM_NUM_THREADS", "2")
import numpy as np
import tvm
from tvm.script import tirx as T
from cortex_tvm import tir_pipeline
from cortex_tvm.target import make_target

N, K, C = int(sys.argv[1]), 300, 736
S = int(sys.argv[2])
CH = C // 32


# one tile, two layouts of w: (K, C) read w[k, chunk * 32 + lane], or panels (C/32, K, 32) read w[chunk, k, lane]
TILE = """
@T.prim_func
def NAME(a: T.Buffer((N, K), "float32"), idx: T.Buffer((N,), "int32"), w: T.Buffer(W_SHAPE, "float32"), out: T.Buffer((N, C), "float32")):
    T.func_attr({"global_symbol": "NAME", "tirx.noalias": True})
    for tile in T.parallel(N // 8):
        for chunk in range(CH):
            acc = T.alloc_buffer((8, 32), "float32", scope="local")
            for t in T.unroll(8):
                for lane in T.vectorized(32):
                    acc[t, lane] = T.float32(0)
            for k in range(K):
                for t in T.unroll(8):
                    for lane in T.vectorized(32):
                        acc[t, lane] = acc[t, lane] + a[idx[tile * 8 + t], k] * W_READ
            for t in T.unroll(8):
                for lane in T.vectorized(32):
                    out[tile * 8 + t, chunk * 32 + lane] = acc[t, lane]
"""
LAYOUTS = {"strided": ("(K, S)", "w[k, chunk * 32 + lane]"), "panels": ("(CH, K, 32)", "w[chunk, k, lane]")}
functions = {}
for name, (shape, read) in LAYOUTS.items():
    source = TILE.replace("NAME", name).replace("W_SHAPE", shape).replace("W_READ", read)
    for constant, value in (("CH", CH), ("N", N), ("K", K), ("C", C), ("S", S)):
        source = re.sub(rf"\b{constant}\b", str(value), source)
    functions[name] = tvm.script.from_source(source, extra_vars={"T": T})


target = make_target("llvm")
ex = tvm.compile(tvm.IRModule(functions), target=target, tir_pipeline=tir_pipeline.NAME)
rng = np.random.default_rng(0)
a = rng.standard_normal((N, K)).astype(np.float32)
w = rng.standard_normal((K, S)).astype(np.float32)
wp = np.ascontiguousarray(w[:, :C].reshape(K, CH, 32).transpose(1, 0, 2))
perm = np.arange(N, dtype=np.int32) if len(sys.argv) < 4 else np.random.default_rng(5).permutation(N).astype(np.int32)
ref = a[perm] @ w[:, :C]
args = {"strided": w, "panels": wp}
for rnd in range(3):
    for name in ("strided", "panels"):
        f = ex[name]
        A, I, Wt, O = (tvm.runtime.tensor(x) for x in (a, perm, args[name], np.zeros((N, C), np.float32)))
        f(A, I, Wt, O)
        np.testing.assert_allclose(O.numpy(), ref, rtol=1e-4, atol=1e-3)
        best = 1e9
        for _ in range(50):
            t0 = time.perf_counter(); f(A, I, Wt, O); best = min(best, time.perf_counter() - t0)
        if rnd == 2:
            print(f"N={N} K={K} C={C} {name:8s} {2 * N * K * C / best / 1e9:6.1f} GFLOP/s ({1e6 * best:.1f} us)")
