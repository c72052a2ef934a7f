# widen into panels: out[b*PB + i//16, r, i%16] = w[r, b*block + i], w (R, C = NB*block); variants, 2 threads
import os, sys
os.environ.setdefault("TVM_NUM_THREADS", "2")
import numpy as np
from tvm.script import tirx as T
from cortex_tvm.target import make_target
from probe_timing import run_variants
R, C, BLOCK = (int(a) for a in sys.argv[1:4])
PAD = -(-BLOCK // 16) * 16; PB = PAD // 16; NB = C // BLOCK; NP = NB * PB
WH = BLOCK // 16; TAIL = BLOCK % 16
def variant_current():
    @T.prim_func
    def f(w_: T.handle, o_: T.handle):
        T.func_attr({"global_symbol": "f", "tirx.noalias": True})
        w = T.match_buffer(w_, (R, C), "float32"); o = T.match_buffer(o_, (NP, R, 16), "float32")
        for r in T.parallel(R):
            for b in range(NB):
                for p in range(WH):
                    for l in T.vectorized(16):
                        o[b * PB + (p * 16 + l) // 16, r, (p * 16 + l) % 16] = w[r, b * BLOCK + (p * 16 + l)]
                for l in T.vectorized(TAIL):
                    o[b * PB + (WH * 16 + l) // 16, r, (WH * 16 + l) % 16] = w[r, b * BLOCK + (WH * 16 + l)]
    return f
def variant_simple_index():
    @T.prim_func
    def f(w_: T.handle, o_: T.handle):
        T.func_attr({"global_symbol": "f", "tirx.noalias": True})
        w = T.match_buffer(w_, (R, C), "float32"); o = T.match_buffer(o_, (NP, R, 16), "float32")
        for r in T.parallel(R):
            for b in range(NB):
                for p in range(WH):
                    for l in T.vectorized(16):
                        o[b * PB + p, r, l] = w[r, b * BLOCK + p * 16 + l]
                for l in T.vectorized(TAIL):
                    o[b * PB + WH, r, l] = w[r, b * BLOCK + WH * 16 + l]
    return f
def variant_panel_major():
    @T.prim_func
    def f(w_: T.handle, o_: T.handle):
        T.func_attr({"global_symbol": "f", "tirx.noalias": True})
        w = T.match_buffer(w_, (R, C), "float32"); o = T.match_buffer(o_, (NP, R, 16), "float32")
        for bp in T.parallel(NB * PB):
            if bp % PB < WH:
                for r in range(R):
                    for l in T.vectorized(16):
                        o[bp, r, l] = w[r, bp // PB * BLOCK + bp % PB * 16 + l]
            else:
                for r in range(R):
                    for l in T.vectorized(TAIL):
                        o[bp, r, l] = w[r, bp // PB * BLOCK + WH * 16 + l]
    return f
def variant_rows_chunked():
    # rows in chunks of 8 per task: fewer, longer tasks
    @T.prim_func
    def f(w_: T.handle, o_: T.handle):
        T.func_attr({"global_symbol": "f", "tirx.noalias": True})
        w = T.match_buffer(w_, (R, C), "float32"); o = T.match_buffer(o_, (NP, R, 16), "float32")
        for rc in T.parallel((R + 31) // 32):
            for b in range(NB):
                for p in range(WH):
                    for r in range(rc * 32, T.min(rc * 32 + 32, R)):
                        for l in T.vectorized(16):
                            o[b * PB + p, r, l] = w[r, b * BLOCK + p * 16 + l]
                for r in range(rc * 32, T.min(rc * 32 + 32, R)):
                    for l in T.vectorized(TAIL):
                        o[b * PB + WH, r, l] = w[r, b * BLOCK + WH * 16 + l]
    return f
target = make_target("llvm")
w = np.random.default_rng(0).standard_normal((R, C)).astype(np.float32)
ref = np.zeros((NP, R, 16), np.float32); mask = np.zeros((NP, R, 16), bool)
for b in range(NB):
    for i in range(BLOCK):
        ref[b * PB + i // 16, :, i % 16] = w[:, b * BLOCK + i]; mask[b * PB + i // 16, :, i % 16] = True
run_variants({n[len("variant_"):]: f for n, f in globals().items() if n.startswith("variant_")},
             sys.argv[4:] or ["current", "simple_index", "panel_major", "rows_chunked"], w, ref, mask, target)
