import sys, time, numpy as np, tvm
from tvm.script import tirx as T
from cortex_tvm import target as ctt
tgt = tvm.target.Target(ctt.host_llvm())
NB = int(sys.argv[1]); W = int(sys.argv[2]) if len(sys.argv) > 2 else 32
NT = 19 * 5   # row tiles of 8 (i tiles x g)
NC = 2 * 4    # column chunks (j x ko)
NBLK = 550 // NB
@T.prim_func
def f(Ap: T.Buffer((NBLK, NT, NB, 8), "float32"), Bp: T.Buffer((NBLK, NC, NB, W), "float32"), R: T.Buffer((NT, NC, 8, W), "float32")):
    T.func_attr({"tirx.noalias": True})
    for blk in range(NBLK):
        for rt in range(NT):
            for cc in range(NC):
                acc = T.alloc_buffer((8, W), "float32", scope="local")
                for t in T.unroll(8):
                    for l in T.vectorized(W):
                        acc[t, l] = R[rt, cc, t, l]
                for n in range(NB):
                    for t in T.unroll(8):
                        for l in T.vectorized(W):
                            acc[t, l] = acc[t, l] + Ap[blk, rt, n, t] * Bp[blk, cc, n, l]
                for t in T.unroll(8):
                    for l in T.vectorized(W):
                        R[rt, cc, t, l] = acc[t, l]
lib = tvm.compile(tvm.IRModule({"main": f}), target=tgt)
rng = np.random.default_rng(0)
A = rng.standard_normal((NBLK, NT, NB, 8)).astype("float32"); Bm = rng.standard_normal((NBLK, NC, NB, W)).astype("float32")
args = [tvm.runtime.tensor(A), tvm.runtime.tensor(Bm), tvm.runtime.tensor(np.zeros((NT, NC, 8, W), "float32"))]
best = 1e9
for r in range(20):
    t0 = time.perf_counter(); lib["main"](*args); best = min(best, time.perf_counter() - t0)
print(f"NB={NB} W={W}: {2 * NBLK * NB * NT * 8 * NC * W / best / 1e9:.1f} GFLOP/s (1 thread)")
