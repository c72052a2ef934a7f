"""How fast each core reads its 1.31 MB half of TreeLSTM H=256's U (more than its 512 KB L2)
with both cores reading: a vectorized TIR sum.  `TVM_NUM_THREADS=2 python read_bandwidth.py`."""
import tvm, numpy as np
from tvm.script import tirx as T
R = 1310720 // 4 // 64   # per core 1.31 MB in rows of 64 floats
@T.prim_func(s_tir=True)
def rd(A: T.Buffer((2, R, 64), "float32"), out: T.Buffer((2, 64), "float32")):
    for c, r, j in T.grid(2, R, 64):
        with T.sblock("s"):
            vc, vr, vj = T.axis.remap("SRS", [c, r, j])
            with T.init():
                out[vc, vj] = T.float32(0)
            out[vc, vj] = out[vc, vj] + A[vc, vr, vj]
from tvm import s_tir
s = s_tir.Schedule(rd)
b = s.get_sblock("s"); c, r, j = s.get_loops(b)
s.reorder(c, j, r)
j0, j1 = s.split(j, [None, 8])
s.reorder(c, r, j0, j1)
s.parallel(c); s.vectorize(j1); s.unroll(j0)
s.decompose_reduction(b, r)
lib = tvm.compile(s.mod, target=tvm.target.Target({"kind": "llvm", "mcpu": tvm.target.codegen.llvm_get_system_cpu()}))
A = tvm.runtime.tensor(np.ones((2, R, 64), "float32")); o = tvm.runtime.tensor(np.zeros((2, 64), "float32"))
t = lib.mod.time_evaluator("rd", tvm.cpu(), number=200, repeat=10)(A, o)
print(f"each core reads 1.31 MB: {t.min*1e6:.1f} us -> {1.31e6/t.min/1e9:.1f} GB/s per core")
