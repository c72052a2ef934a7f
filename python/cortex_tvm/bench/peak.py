"""This CPU's fp32 FMA peak, measured: the bench's denominator for "run-time FLOPs / peak".

numpy's sgemm is the wrong denominator on some CPUs: OpenBLAS reaches about 48% of the FMA
rate of a Zen 5 (210 of 436 GFLOP/s on 2 cores), so a kernel "at 100% of sgemm" there would
be at half the machine.  `fma_peak` times a TVM kernel that does nothing but FMAs: on every
core, `chains` independent accumulators of the native vector width, each updated
``acc = fma(acc, m, b)`` per step, held in registers (enough chains to cover the FMA latency of
two units), built with this package's TIR pipeline so the accumulators stay in registers.

    python -m cortex_tvm.bench.peak   # the FMA peak, and re-read bandwidth per core by slice size

`read_bandwidth` is the other half of a limit calculation: how fast each core re-reads its
share of a weight (U: 1.3 MB per core at H=256 on 2 cores, fp32), as a level of a batch of
one tree does.
"""
from __future__ import annotations

import numpy as np
import tvm
from tvm.script import tirx as T

from .. import tir_pipeline
from ..target import bytes_of, cpu_info, make_target
from ..timing import best_of

#: FMA steps per call: long enough that a call's fork and join is noise (about 10 ms on 2 cores)
STEPS = 200_000
#: registers left free beside the accumulators (the two broadcast operands, the loop)
FREE_REGISTERS = 8


def _best_call(function, args, repeats: int) -> float:
    """Seconds of the fastest of `repeats` calls of `function(*args)`, after one warm call
    (which starts the thread pool)."""
    function(*args)
    return best_of(lambda a: function(*a), args, repeats)


def fma_kernel(cores: int, chains: int, lanes: int):
    """A PrimFunc `peak(out, steps)`: `steps` FMAs on each of `chains` vectors per core."""
    vector = f"float32x{lanes}"

    @T.prim_func
    def peak(out: T.Buffer((cores * chains * lanes,), "float32"), steps: T.int32):
        T.func_attr({"global_symbol": "peak", "tir.noalias": True})
        for core in T.parallel(cores):
            acc = T.alloc_buffer((chains * lanes,), "float32")
            for a in T.unroll(chains):
                acc[T.ramp(a * lanes, 1, lanes)] = T.broadcast(T.float32(0.5), lanes)
            for _ in range(steps):
                for a in T.unroll(chains):
                    acc[T.ramp(a * lanes, 1, lanes)] = T.call_llvm_pure_intrin(
                        vector, "llvm.fma", acc[T.ramp(a * lanes, 1, lanes)],
                        T.broadcast(T.float32(0.999), lanes), T.broadcast(T.float32(0.001), lanes))
            # the results leave the kernel, so no step is dead code
            for i in range(chains * lanes):
                out[core * chains * lanes + i] = acc[i]
    return peak


def fma_peak(target="llvm", repeats: int = 5) -> dict:
    """{"gflops", "lanes", "chains", "cores"}: the best of `repeats` timed calls of `fma_kernel`
    for `target` (default: this CPU, every thread TVM's pool has)."""
    tgt = make_target(target)
    info = cpu_info(tgt)
    chains = info.registers - FREE_REGISTERS
    func = fma_kernel(info.cores, chains, info.lanes)
    executable = tvm.compile(tvm.IRModule({"peak": func}), target=tgt, tir_pipeline=tir_pipeline.NAME)
    out = tvm.runtime.tensor(np.zeros(info.cores * chains * info.lanes, np.float32))
    best = _best_call(executable["peak"], (out, STEPS), repeats)
    flops = 2.0 * info.cores * chains * info.lanes * STEPS
    return {"gflops": flops / best / 1e9, "lanes": info.lanes, "chains": chains, "cores": info.cores}


def read_kernel(cores: int, floats: int, lanes: int, chains: int = 8):
    """A PrimFunc `stream(data, out, reps)`: each core sums its own `floats` of `data`, `reps`
    times, into `chains` vector accumulators (the reads are what it costs)."""
    step = chains * lanes
    blocks = floats // step

    @T.prim_func
    def stream(data: T.Buffer((cores * floats,), "float32"), out: T.Buffer((cores * step,), "float32"),
               reps: T.int32):
        T.func_attr({"global_symbol": "stream", "tir.noalias": True})
        for core in T.parallel(cores):
            acc = T.alloc_buffer((step,), "float32")
            for i in T.vectorized(step):
                acc[i] = T.float32(0)
            for _, b in T.grid(reps, blocks):
                for a in T.unroll(chains):
                    acc[T.ramp(a * lanes, 1, lanes)] = acc[T.ramp(a * lanes, 1, lanes)] + data[
                        T.ramp(core * floats + b * step + a * lanes, 1, lanes)]
            for i in range(step):
                out[core * step + i] = acc[i]
    return stream


def read_bandwidth(bytes_per_core: int, target="llvm", repeats: int = 5) -> dict:
    """{"gb_s_per_core", "bytes_per_core", "cores"}: how fast every core at once re-reads a
    slice of `bytes_per_core` (from L1, L2 or L3 by its size): what streaming a weight costs."""
    tgt = make_target(target)
    info = cpu_info(tgt)
    step, size = 8 * info.lanes, bytes_of("float32")            # the kernel reads float32
    floats = max(step, bytes_per_core // size // step * step)
    func = read_kernel(info.cores, floats, info.lanes)
    executable = tvm.compile(tvm.IRModule({"stream": func}), target=tgt, tir_pipeline=tir_pipeline.NAME)
    data = tvm.runtime.tensor(np.ones(info.cores * floats, np.float32))
    out = tvm.runtime.tensor(np.zeros(info.cores * step, np.float32))
    reps = max(4, int(2e9 // (floats * size * info.cores)))    # about 2 GB read per call
    best = _best_call(executable["stream"], (data, out, reps), repeats)
    return {"gb_s_per_core": floats * size * reps / best / 1e9, "bytes_per_core": floats * size,
            "cores": info.cores}


if __name__ == "__main__":
    got = fma_peak()
    print(f"fp32 FMA peak: {got['gflops']:.1f} GFLOP/s ({got['cores']} cores x {got['chains']} chains of "
          f"{got['lanes']} lanes)")
    for size in (32 << 10, 512 << 10, 1300 << 10, 650 << 10, 5 << 20):
        got = read_bandwidth(size)
        print(f"re-reading {got['bytes_per_core'] / 1e6:.2f} MB per core on {got['cores']} cores: "
              f"{got['gb_s_per_core']:.1f} GB/s per core")
