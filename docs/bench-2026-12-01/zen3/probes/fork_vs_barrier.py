"""Fork and join per level against one parallel region with a barrier per level: a 200-level
TIR kernel with one small parallel loop per level.  `TVM_NUM_THREADS=2 python fork_vs_barrier.py`;
output in fork_vs_barrier.txt (nobarrier: the wrong answer the barrier prevents)."""
import tvm, numpy as np, sys
from tvm.script import tirx as T
from tvm import s_tir
L=200
@T.prim_func(s_tir=True)
def f(A: T.Buffer((L, 256), "float32"), B: T.Buffer((256,), "float32")):
    for l in range(1, L):
        with T.sblock("level"):
            vl = T.axis.opaque(L, l)
            T.reads(A[0:L, 0:256]); T.writes(A[0:L, 0:256])
            for i in range(256):
                with T.sblock("c"):
                    vi = T.axis.remap("S", [i])
                    T.reads(B[vi]); T.writes(A[vl, vi])
                    A[vl, vi] = A[vl - 1, (vi + 1) % 256] * 0.5 + B[vi]
def build(mode):
    s = s_tir.Schedule(f)
    b = s.get_sblock("c")
    (i,) = s.get_loops(b)
    io, ii = s.split(i, [None, 8])
    s.parallel(io)
    if mode in ("persist", "nobarrier"):
        l = s.get_loops(s.get_sblock("level"))[0]
        s.annotate(l, "pragma_parallel_launch_point", 1)
        if mode == "persist":
            s.annotate(io, "pragma_parallel_barrier_when_finish", 1)
    return tvm.compile(s.mod, target="llvm")
A = np.random.rand(L, 256).astype("float32"); B = np.random.rand(256).astype("float32")
ref = A.copy()
for l in range(1, L):
    ref[l] = ref[l-1][(np.arange(256)+1) % 256] * 0.5 + B
for mode in ("fork", "persist", "nobarrier"):
    lib = build(mode)
    errs = []
    for _ in range(20):
        a = tvm.runtime.tensor(A); lib(a, tvm.runtime.tensor(B)); errs.append(np.abs(a.numpy() - ref).max())
    a = tvm.runtime.tensor(A); bb = tvm.runtime.tensor(B)
    t = lib.mod.time_evaluator("f", tvm.cpu(), number=50, repeat=10)(a, bb)
    print(mode, "maxerr", max(errs), "us per level %.3f" % (t.min * 1e6 / L))
