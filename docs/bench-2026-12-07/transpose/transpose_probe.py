# transpose into panels: out[b*P + i//16, k, i%16] = w[b*block + i, k], w (rows, K); variants timed, 2 threads
import os, sys
os.environ.setdefault("TVM_NUM_THREADS", "2")
import numpy as np
from tvm.script import tirx as T
from cortex_tvm.target import make_target
from probe_timing import run_variants
ROWS, K, BLOCK = (int(a) for a in sys.argv[1:4]) if len(sys.argv) > 3 else (750, 300, 150)
PAD = -(-BLOCK // 16) * 16; PB = PAD // 16; NB = ROWS // BLOCK; NP = NB * PB
KT = -(-K // 16)
def variant_current():
    @T.prim_func
    def f(w_: T.handle, o_: T.handle):
        T.func_attr({"global_symbol": "f", "tirx.noalias": True})
        w = T.match_buffer(w_, (ROWS, K), "float32"); o = T.match_buffer(o_, (NP, K, 16), "float32")
        for bt in T.parallel(NB * PB):
            for ct in range(KT):
                for c in range(16):
                    for r in range(16):
                        if (bt % PB) * 16 + r < BLOCK and ct * 16 + c < K:
                            o[bt, ct * 16 + c, r] = w[(bt // PB) * BLOCK + (bt % PB) * 16 + r, ct * 16 + c]
    return f
def variant_rowread():
    @T.prim_func
    def f(w_: T.handle, o_: T.handle):
        T.func_attr({"global_symbol": "f", "tirx.noalias": True})
        w = T.match_buffer(w_, (ROWS, K), "float32"); o = T.match_buffer(o_, (NP, K, 16), "float32")
        for bt in T.parallel(NB * PB):
            for r in range(16):
                if (bt % PB) * 16 + r < BLOCK:
                    for k in range(K):
                        o[bt, k, r] = w[(bt // PB) * BLOCK + (bt % PB) * 16 + r, k]
    return f
def variant_unrolled():
    @T.prim_func
    def f(w_: T.handle, o_: T.handle):
        T.func_attr({"global_symbol": "f", "tirx.noalias": True})
        w = T.match_buffer(w_, (ROWS, K), "float32"); o = T.match_buffer(o_, (NP, K, 16), "float32")
        for bt in T.parallel(NB * PB):
            for k in range(K):
                for r in T.unroll(16):
                    if (bt % PB) * 16 + r < BLOCK:
                        o[bt, k, r] = w[(bt // PB) * BLOCK + (bt % PB) * 16 + r, k]
    return f
def variant_tile_rowread():
    @T.prim_func
    def f(w_: T.handle, o_: T.handle):
        T.func_attr({"global_symbol": "f", "tirx.noalias": True})
        w = T.match_buffer(w_, (ROWS, K), "float32"); o = T.match_buffer(o_, (NP, K, 16), "float32")
        for bt in T.parallel(NB * PB):
            for ct in range(KT):
                for r in range(16):
                    if (bt % PB) * 16 + r < BLOCK:
                        for c in range(16):
                            if ct * 16 + c < K:
                                o[bt, ct * 16 + c, r] = w[(bt // PB) * BLOCK + (bt % PB) * 16 + r, ct * 16 + c]
    return f
def variant_tile_vec():
    # a 16 x 16 tile: each source row's 16 columns one vector load into a local tile, then each output row one vector
    @T.prim_func
    def f(w_: T.handle, o_: T.handle):
        T.func_attr({"global_symbol": "f", "tirx.noalias": True})
        w = T.match_buffer(w_, (ROWS, K), "float32"); o = T.match_buffer(o_, (NP, K, 16), "float32")
        for bt in T.parallel(NB * PB):
            t = T.alloc_buffer((16, 16), "float32", scope="local")
            for ct in range(KT):
                for r in T.unroll(16):
                    for c in T.vectorized(16):
                        t[c, r] = T.if_then_else((bt % PB) * 16 + r < BLOCK and ct * 16 + c < K,
                                                 w[T.min((bt // PB) * BLOCK + (bt % PB) * 16 + r, ROWS - 1), T.min(ct * 16 + c, K - 1)], T.float32(0))
                for c in T.unroll(16):
                    if ct * 16 + c < K:
                        for r in T.vectorized(16):
                            o[bt, ct * 16 + c, r] = t[c, r]
    return f
KW = K // 16; KTAIL = K % 16
def variant_tile_hoisted():
    @T.prim_func
    def f(w_: T.handle, o_: T.handle):
        T.func_attr({"global_symbol": "f", "tirx.noalias": True})
        w = T.match_buffer(w_, (ROWS, K), "float32"); o = T.match_buffer(o_, (NP, K, 16), "float32")
        for bt in T.parallel(NB * PB):
            for ct in range(KW):
                for r in range(T.min(16, BLOCK - (bt % PB) * 16)):
                    for c in T.unroll(16):
                        o[bt, ct * 16 + c, r] = w[(bt // PB) * BLOCK + (bt % PB) * 16 + r, ct * 16 + c]
            for r in range(T.min(16, BLOCK - (bt % PB) * 16)):
                for c in range(KTAIL):
                    o[bt, KW * 16 + c, r] = w[(bt // PB) * BLOCK + (bt % PB) * 16 + r, KW * 16 + c]
    return f
def variant_tile8():
    @T.prim_func
    def f(w_: T.handle, o_: T.handle):
        T.func_attr({"global_symbol": "f", "tirx.noalias": True})
        w = T.match_buffer(w_, (ROWS, K), "float32"); o = T.match_buffer(o_, (NP, K, 16), "float32")
        for bt in T.parallel(NB * PB):
            for ct in range(KT):
                for r in range(T.min(16, BLOCK - (bt % PB) * 16)):
                    for c in range(T.min(16, K - ct * 16)):
                        o[bt, ct * 16 + c, r] = w[(bt // PB) * BLOCK + (bt % PB) * 16 + r, ct * 16 + c]
    return f
target = make_target({"kind": "llvm", "mcpu": os.environ["TGT"]} if os.environ.get("TGT") else "llvm")
w = np.random.default_rng(0).standard_normal((ROWS, K)).astype(np.float32)
ref = np.zeros((NP, K, 16), np.float32); mask = np.zeros((NP, K, 16), bool)
for b in range(NB):
    for i in range(BLOCK):
        ref[b * PB + i // 16, :, i % 16] = w[b * BLOCK + i]; mask[b * PB + i // 16, :, i % 16] = True
run_variants({n[len("variant_"):]: f for n, f in globals().items() if n.startswith("variant_")},
             sys.argv[4:] or ["current", "rowread", "unrolled", "tile_rowread", "tile_vec"], w, ref, mask, target, ROWS * K)
