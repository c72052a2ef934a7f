# FlushDenormals's cost per parallel launch: a kernel of 2000 launches of a tiny parallel loop built with and without
# the pass, calls interleaved; run from the repo root: python docs/bench-2026-12-06/amd-flush/launch_cost.py
import os, time
os.environ.setdefault("TVM_NUM_THREADS", "2")
import numpy as np, tvm
from tvm.script import tirx as T
import cortex_tvm as ct
from cortex_tvm import tir_pipeline
@T.prim_func
def launches(y: T.Buffer((2, 16), "float32")):
    for step in range(2000):
        for row in T.parallel(2):
            for col in range(16):
                y[row, col] = y[row, col] * T.float32(0.5) + T.float32(1)
def build():
    return tvm.compile(tvm.IRModule({"f": launches}), target=ct.make_target("llvm"), tir_pipeline=tir_pipeline.NAME)["launches"]
new = build()
saved = tir_pipeline.FlushDenormals; tir_pipeline.FlushDenormals = lambda m: m
old = build(); tir_pipeline.FlushDenormals = saved
y = tvm.runtime.tensor(np.zeros((2, 16), np.float32))
t = {"new": [], "old": []}
for _ in range(300):
    for name, f in (("new", new), ("old", old)):
        s = time.perf_counter(); f(y); t[name].append(time.perf_counter() - s)
for k, v in t.items():
    print(f"{k}: min {1e6 * min(v) / 2000:.3f} us a launch, median {1e6 * np.median(v) / 2000:.3f}")
print(f"flush costs {1e9 * (np.median(t['new']) - np.median(t['old'])) / 2000:.1f} ns a launch (median), "
      f"{1e9 * (min(t['new']) - min(t['old'])) / 2000:.1f} (min)")
