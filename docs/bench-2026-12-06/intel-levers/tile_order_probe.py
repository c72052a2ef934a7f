# The training forward's internal register tile (8 nodes x 32 columns, K = 2 x 150: two children's h rows at random
# places) over N = argv[1] nodes and 20 chunks of 32 columns of U_T (300, S = argv[2] or 800; 4 chunks of each
# gate's 160), in four forms: "chunks" (the pass's order: each core half of the chunks, every node tile inside),
# "panels" (the same, each chunk's weights one contiguous (300, 32) panel), "panels16" (panels of 16 columns, two
# per tile) and "tiles" (node tiles shared among the cores, every chunk inside).  GFLOP/s, best of 50-200 calls,
# each form's output checked against numpy.  TVM_NUM_THREADS 2 unless set.
import os, re, sys, time
os.environ.setdefault("TVM_NUM_THREADS", "2")
import numpy as np, tvm
from tvm.script import tirx as T
from cortex_tvm import tir_pipeline
from cortex_tvm.target import make_target
N = int(sys.argv[1]); CH = 20; S = int(sys.argv[2]) if len(sys.argv) > 2 else 800; KC = 150
SRC = {
"chunks": """
@T.prim_func
def chunks(h: T.Buffer((M, 150), "float32"), ch: T.Buffer((N, 2), "int32"), w: T.Buffer((300, S), "float32"), out: T.Buffer((N, S), "float32")):
    T.func_attr({"global_symbol": "chunks", "tirx.noalias": True})
    for core in T.parallel(2):
        for chunk in range(core * CH // 2, (core + 1) * CH // 2):
            for tile in range(N // 8):
                acc = T.alloc_buffer((8, 32), "float32", scope="local")
                for t in T.unroll(8):
                    for lane in T.vectorized(32):
                        acc[t, lane] = T.float32(0)
                for c, k in T.grid(2, 150):
                    for t in T.unroll(8):
                        for lane in T.vectorized(32):
                            acc[t, lane] = acc[t, lane] + h[ch[tile * 8 + t, c], k] * w[c * 150 + k, chunk // 4 * 160 + chunk % 4 * 32 + lane]
                for t in T.unroll(8):
                    for lane in T.vectorized(32):
                        out[tile * 8 + t, chunk // 4 * 160 + chunk % 4 * 32 + lane] = acc[t, lane]
""",
"panels": """
@T.prim_func
def panels(h: T.Buffer((M, 150), "float32"), ch: T.Buffer((N, 2), "int32"), w: T.Buffer((CH, 300, 32), "float32"), out: T.Buffer((N, S), "float32")):
    T.func_attr({"global_symbol": "panels", "tirx.noalias": True})
    for core in T.parallel(2):
        for chunk in range(core * CH // 2, (core + 1) * CH // 2):
            for tile in range(N // 8):
                acc = T.alloc_buffer((8, 32), "float32", scope="local")
                for t in T.unroll(8):
                    for lane in T.vectorized(32):
                        acc[t, lane] = T.float32(0)
                for c, k in T.grid(2, 150):
                    for t in T.unroll(8):
                        for lane in T.vectorized(32):
                            acc[t, lane] = acc[t, lane] + h[ch[tile * 8 + t, c], k] * w[chunk, c * 150 + k, lane]
                for t in T.unroll(8):
                    for lane in T.vectorized(32):
                        out[tile * 8 + t, chunk // 4 * 160 + chunk % 4 * 32 + lane] = acc[t, lane]
""",
"panels16": """
@T.prim_func
def panels16(h: T.Buffer((M, 150), "float32"), ch: T.Buffer((N, 2), "int32"), w: T.Buffer((CH * 2, 300, 16), "float32"), out: T.Buffer((N, S), "float32")):
    T.func_attr({"global_symbol": "panels16", "tirx.noalias": True})
    for core in T.parallel(2):
        for chunk in range(core * CH // 2, (core + 1) * CH // 2):
            for tile in range(N // 8):
                acc = T.alloc_buffer((8, 32), "float32", scope="local")
                for t in T.unroll(8):
                    for lane in T.vectorized(32):
                        acc[t, lane] = T.float32(0)
                for c, k in T.grid(2, 150):
                    for t in T.unroll(8):
                        for lane in T.vectorized(16):
                            acc[t, lane] = acc[t, lane] + h[ch[tile * 8 + t, c], k] * w[chunk * 2, c * 150 + k, lane]
                        for lane in T.vectorized(16):
                            acc[t, 16 + lane] = acc[t, 16 + lane] + h[ch[tile * 8 + t, c], k] * w[chunk * 2 + 1, c * 150 + k, lane]
                for t in T.unroll(8):
                    for lane in T.vectorized(32):
                        out[tile * 8 + t, chunk // 4 * 160 + chunk % 4 * 32 + lane] = acc[t, lane]
""",
"tiles": """
@T.prim_func
def tiles(h: T.Buffer((M, 150), "float32"), ch: T.Buffer((N, 2), "int32"), w: T.Buffer((300, S), "float32"), out: T.Buffer((N, S), "float32")):
    T.func_attr({"global_symbol": "tiles", "tirx.noalias": True})
    for tile in T.parallel(N // 8):
        for chunk in range(CH):
            acc = T.alloc_buffer((8, 32), "float32", scope="local")
            for t in T.unroll(8):
                for lane in T.vectorized(32):
                    acc[t, lane] = T.float32(0)
            for c, k in T.grid(2, 150):
                for t in T.unroll(8):
                    for lane in T.vectorized(32):
                        acc[t, lane] = acc[t, lane] + h[ch[tile * 8 + t, c], k] * w[c * 150 + k, chunk // 4 * 160 + chunk % 4 * 32 + lane]
            for t in T.unroll(8):
                for lane in T.vectorized(32):
                    out[tile * 8 + t, chunk // 4 * 160 + chunk % 4 * 32 + lane] = acc[t, lane]
"""}
M = 4 * N
fs = {}
for name, s in SRC.items():
    for k, v in (("CH", CH), ("N", N), ("S", S), ("M", M)):
        s = re.sub(rf"\b{k}\b", str(v), s)
    fs[name] = tvm.script.from_source(s, extra_vars={"T": T})
ex = tvm.compile(tvm.IRModule(fs), target=make_target("llvm"), tir_pipeline=tir_pipeline.NAME)
rng = np.random.default_rng(0)
h = rng.standard_normal((M, 150)).astype(np.float32)
ch = rng.permutation(M)[:2 * N].reshape(N, 2).astype(np.int32)
w = rng.standard_normal((300, S)).astype(np.float32)
wp = np.ascontiguousarray(w[:, np.concatenate([np.arange(g * 160, g * 160 + 128) for g in range(5)])].reshape(300, CH, 32).transpose(1, 0, 2))
wp16 = np.ascontiguousarray(w[:, np.concatenate([np.arange(g * 160, g * 160 + 128) for g in range(5)])].reshape(300, CH * 2, 16).transpose(1, 0, 2))
cols = np.concatenate([np.arange(g * 160, g * 160 + 128) for g in range(5)])
ref = np.concatenate([h[ch[:, 0]], h[ch[:, 1]]], 1) @ w
flops = 2 * N * 300 * CH * 32
for rnd in range(3):
    for name in SRC:
        A, I, Wt, O = (tvm.runtime.tensor(x) for x in (h, ch, wp if name == 'panels' else wp16 if name == 'panels16' else w, np.zeros((N, S), np.float32)))
        ex[name](A, I, Wt, O)
        np.testing.assert_allclose(O.numpy()[:, cols], ref[:, cols], rtol=1e-3, atol=1e-3)
        best = 1e9
        for _ in range(200 if N < 100 else 50):
            t0 = time.perf_counter(); ex[name](A, I, Wt, O); best = min(best, time.perf_counter() - t0)
        if rnd == 2: print(f"N={N} {name:7s} {flops / best / 1e9:6.1f} GFLOP/s ({1e6 * best:.1f} us)")
