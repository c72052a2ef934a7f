"""The issue-19 probe: one register-tiled GEMM micro-kernel, Y (N x R) = X (N x K) . U^T, three ways,
written directly in TIR and timed with TVM's time_evaluator on one core:

  fp32      U packed as float32 [R/64, K, 64]; per k: 3 nodes x 4 vectors of 16 float32 FMAs
  sbf16     U packed as bfloat16 bits (uint16), widened to float32 in registers (store_bf16)
  dpbf16    U packed as bfloat16 pairs [R/64, K/2, 64] (uint32); per k pair: 3 x 4 vdpbf16ps,
            X rounded to bfloat16 pairs once per node first (included in the time)

Node tile 3, column tile 64 (12 accumulators).  err: max |Y - numpy| against float64 products of
the same operands (U rounded to bfloat16 for sbf16, U and X for dpbf16).
`python dpbf16_kernel.py 512 1280` (K, R: TreeLSTM H=256's U is 1280 x 512); needs AVX512_BF16."""
import sys

import numpy as np
import tvm
from tvm.script import tirx as T

from cortex_tvm.dot_bf16 import FUNC, LLVM_IR

NT, CT = 3, 64


def make(kind, N, K, R):
    RO, KP = R // CT, K // 2
    if kind in ("fp32", "sbf16"):
        dtype = "float32" if kind == "fp32" else "uint16"

        @T.prim_func
        def f(X: T.Buffer((N, K), "float32"), W: T.Buffer((RO, K, CT), dtype), Y: T.Buffer((N, R), "float32")):
            T.func_attr({"global_symbol": "f", "tirx.noalias": True})
            acc = T.alloc_buffer((NT, CT), "float32", scope="local")
            for ro in range(RO):
                for jo in range(N // NT):
                    for a, b in T.grid(NT, CT):
                        acc[a, b] = T.float32(0)
                    for k in range(K):
                        for ji in T.unroll(NT):
                            for ri in T.unroll(CT // 16):
                                for lane in T.vectorized(16):
                                    if kind == "fp32":
                                        acc[ji, ri * 16 + lane] = acc[ji, ri * 16 + lane] + \
                                            W[ro, k, ri * 16 + lane] * X[jo * NT + ji, k]
                                    else:
                                        acc[ji, ri * 16 + lane] = acc[ji, ri * 16 + lane] + T.reinterpret(
                                            "float32", T.Cast("uint32", W[ro, k, ri * 16 + lane]) << T.uint32(16)) \
                                            * X[jo * NT + ji, k]
                    for a in T.unroll(NT):
                        for b in T.vectorized(CT):
                            Y[jo * NT + a, ro * CT + b] = acc[a, b]
        return f

    def bits(x):
        b = T.reinterpret("uint32", x)
        return (b + T.uint32(0x7FFF) + ((b >> T.uint32(16)) & T.uint32(1))) >> T.uint32(16)

    @T.prim_func
    def f(X: T.Buffer((N, K), "float32"), W: T.Buffer((RO, KP, CT), "uint32"), Y: T.Buffer((N, R), "float32")):
        T.func_attr({"global_symbol": "f", "tirx.noalias": True})
        xb = T.alloc_buffer((N, KP), "uint32")
        acc = T.alloc_buffer((NT, CT), "float32", scope="local")
        with T.attr(0, "pragma_import_llvm", LLVM_IR):
            for n, kp in T.grid(N, KP):
                xb[n, kp] = bits(X[n, kp * 2]) | (bits(X[n, kp * 2 + 1]) << T.uint32(16))
            for ro in range(RO):
                for jo in range(N // NT):
                    for a, b in T.grid(NT, CT):
                        acc[a, b] = T.float32(0)
                    for kp in range(KP):
                        for ji in T.unroll(NT):
                            for ri in T.unroll(CT // 16):
                                acc[ji, T.ramp(ri * 16, 1, 16)] = T.call_extern(
                                    "float32x16", FUNC, acc[ji, T.ramp(ri * 16, 1, 16)],
                                    T.broadcast(T.reinterpret("int32", xb[jo * NT + ji, kp]), 16),
                                    T.reinterpret("int32x16", W[ro, kp, T.ramp(ri * 16, 1, 16)]))
                    for a in T.unroll(NT):
                        for b in T.vectorized(CT):
                            Y[jo * NT + a, ro * CT + b] = acc[a, b]
    return f


def bf16_bits(x):
    b = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return (((b + 0x7FFF + ((b >> 16) & 1)) >> 16) & 0xFFFF).astype(np.uint16)


def bf16_round(x):
    return (bf16_bits(x).astype(np.uint32) << 16).view(np.float32)


def run(kind, N, K, R, mcpu="znver4"):
    lib = tvm.compile(make(kind, N, K, R), target=tvm.target.Target({"kind": "llvm", "mcpu": mcpu, "num-cores": 1}))
    asm = lib.mod.inspect_source("asm")
    rng = np.random.default_rng(0)
    x = rng.standard_normal((N, K)).astype(np.float32)
    U = (rng.standard_normal((R, K)) / np.sqrt(K)).astype(np.float32)
    RO, KP = R // CT, K // 2
    packed = U.reshape(RO, CT, K).transpose(0, 2, 1)                      # [R/64, K, 64]
    if kind == "fp32":
        w, ref = np.ascontiguousarray(packed), x.astype(np.float64) @ U.T.astype(np.float64)
    elif kind == "sbf16":
        w, ref = bf16_bits(packed), x.astype(np.float64) @ bf16_round(U).T.astype(np.float64)
    else:
        pairs = packed.reshape(RO, KP, 2, CT).transpose(0, 1, 3, 2)      # [R/64, K/2, 64, 2]
        w = bf16_bits(np.ascontiguousarray(pairs)).view(np.uint32).reshape(RO, KP, CT)
        ref = bf16_round(x).astype(np.float64) @ bf16_round(U).T.astype(np.float64)
    Y = tvm.runtime.tensor(np.zeros((N, R), np.float32))
    args = [tvm.runtime.tensor(x), tvm.runtime.tensor(w), Y]
    lib["f"](*args)
    err = float(np.abs(Y.numpy() - ref).max())
    times = lib.mod.time_evaluator("f", tvm.cpu(), number=50, repeat=7)(*args).results
    return err, min(times), float(np.median(times)), asm.count("vdpbf16ps"), asm.count("vfmadd")


if __name__ == "__main__":
    K, R = int(sys.argv[1]), int(sys.argv[2])
    for N in (3, 12, 30, 60):
        base = None
        for kind in ("fp32", "sbf16", "dpbf16"):
            err, best, median, ndp, nfma = run(kind, N, K, R)
            base = base or best
            print(f"N={N:3d} K={K} R={R} {kind:7s} err={err:.1e} min={best * 1e6:8.1f} us  median={median * 1e6:8.1f} us"
                  f"  {2 * N * K * R / best / 1e9:6.1f} GFLOP/s  fp32/this {base / best:4.2f}"
                  f"  (vdpbf16ps {ndp}, vfmadd {nfma} in the asm)", flush=True)
