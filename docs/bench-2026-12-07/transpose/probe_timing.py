# The two probes' harness (transpose_probe.py, widen_probe.py): each variant built, checked against numpy on the copy's
# lanes that the layout fills (`mask`), then timed: the best of 300 calls with warm caches, and the median of 100 calls
# each right after the source was written again with 32 MB of other data written before it.
import time
import numpy as np, tvm
from cortex_tvm import tir_pipeline


def run_variants(variants, names, w, ref, mask, target, elements=None):
    """variants: name -> a function that makes the prim_func f(w, out); elements: also print Gelem/s for that many."""
    big = np.zeros(8 << 20, np.float32)
    for name in names:
        fn = tvm.compile(tvm.IRModule({"f": variants[name]()}), target=target, tir_pipeline=tir_pipeline.NAME)["f"]
        wt = tvm.runtime.tensor(w); ot = tvm.runtime.tensor(np.zeros(ref.shape, np.float32))
        fn(wt, ot); ok = np.array_equal(ot.numpy()[mask], ref[mask])
        best = 1e9; cold = []
        for _ in range(300):
            t = time.perf_counter(); fn(wt, ot); best = min(best, time.perf_counter() - t)
        for _ in range(100):
            big += 1; wt.copyfrom(w)            # caches full of other data, the source just written by this thread
            t = time.perf_counter(); fn(wt, ot); cold.append(time.perf_counter() - t)
        rate = "" if elements is None else f"  {elements / best / 1e9:5.2f} Gelem/s "
        print(f"{name:14s} warm {best * 1e6:7.1f} us{rate}   cold median {np.median(cold)*1e6:7.1f} us  correct={ok}")
