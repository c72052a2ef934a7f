"""The dpbf16 micro-kernel of dpbf16_kernel.py with the state pair rounded where each vdpbf16ps
reads it (what dot_bf16 does inside one parallel region), in the tile TreeLSTM H=256 gets:
3 nodes x 5 vectors of 16 columns.  `python dpbf16_round_each_use.py` (N=30, K=512, R=1280)."""
import numpy as np
import tvm
from tvm.script import tirx as T

from cortex_tvm.dot_bf16 import FUNC, LLVM_IR

NT, CT, G = 3, 16, 5


def make(N, K, R):
    RO, KP = R // (CT * G), K // 2

    def bits(x):
        b = T.reinterpret("uint32", x)
        return (b + T.uint32(0x7FFF) + ((b >> T.uint32(16)) & T.uint32(1))) >> T.uint32(16)

    @T.prim_func
    def f(X: T.Buffer((N, K), "float32"), W: T.Buffer((RO, KP, CT * G), "uint32"), Y: T.Buffer((N, R), "float32")):
        T.func_attr({"global_symbol": "f", "tirx.noalias": True})
        acc = T.alloc_buffer((NT, CT * G), "float32", scope="local")
        with T.attr(0, "pragma_import_llvm", LLVM_IR):
            for ro in range(RO):
                for jo in range(N // NT):
                    for a, b in T.grid(NT, CT * G):
                        acc[a, b] = T.float32(0)
                    for kp in range(KP):
                        for ji in T.unroll(NT):
                            for ri in T.unroll(G):
                                acc[ji, T.ramp(ri * 16, 1, 16)] = T.call_extern(
                                    "float32x16", FUNC, acc[ji, T.ramp(ri * 16, 1, 16)],
                                    T.broadcast(T.reinterpret("int32", bits(X[jo * NT + ji, kp * 2])
                                                              | (bits(X[jo * NT + ji, kp * 2 + 1]) << T.uint32(16))), 16),
                                    T.reinterpret("int32x16", W[ro, kp, T.ramp(ri * 16, 1, 16)]))
                    for a in T.unroll(NT):
                        for b in T.vectorized(CT * G):
                            Y[jo * NT + a, ro * CT * G + b] = acc[a, b]
    return f


N, K, R = 30, 512, 1280
lib = tvm.compile(make(N, K, R), target=tvm.target.Target({"kind": "llvm", "mcpu": "znver4", "num-cores": 1}))
rng = np.random.default_rng(0)
args = [tvm.runtime.tensor(rng.standard_normal((N, K)).astype("float32")),
        tvm.runtime.tensor(np.zeros((R // (CT * G), K // 2, CT * G), "uint32")),
        tvm.runtime.tensor(np.zeros((N, R), "float32"))]
times = lib.mod.time_evaluator("f", tvm.cpu(), number=50, repeat=7)(*args).results
print(f"N={N} K={K} R={R} dpbf16, pair rounded at each use, tile 3 x (5 x 16): min {min(times) * 1e6:.1f} us, "
      f"{2 * N * K * R / min(times) / 1e9:.1f} GFLOP/s")
