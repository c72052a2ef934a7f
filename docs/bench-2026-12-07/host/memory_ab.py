# What the step's memory passes and checks cost, by leaving each out (a probe: the arms without a check or a zeroing
# compute wrong gradients; only their time is of use).  Paired: each round runs every arm for 20 steps, in turn, in one
# process; medians per arm.  From the repo root: ROUNDS=14 PYTHONPATH=python python memory_ab.py bf16
# The arms of memory_ab.txt's first two runs ("no check_rows", "no d_state zero", "states empty", "all four") were this
# script with arms = ["base", "no check_rows", "no all_finite", "no d_state zero", "states empty", "all four"]; run 3's
# ["base", "no all_finite", "blas ctx noop", "blas 1 for good"] ("blas ctx noop": Wm.single_threaded_blas =
# adjoint.single_threaded_blas = contextlib.nullcontext); run 5's ["base", "no all_finite", "no weight checks",
# "no check_rows", "no d_state zero"] ("no weight checks": runtime.checked_weights called with every weight in
# rows_later, so that it checks no values).
# paired A/B: each round runs every arm for K steps, in turn; prints median per-step ms per arm
import os, sys, time, collections
os.environ.setdefault("TVM_NUM_THREADS", "2"); os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import contextlib
import numpy as np
from cortex_tvm import adjoint, runtime, weights as Wm, blas_threads
from step_setup import training_step
s = training_step(precision=sys.argv[1])
m, opt, R, batches = s.module, s.opt, s.R, s.batches
orig = {"check_rows": runtime.check_rows, "all_finite": Wm.all_finite, "zero": adjoint.zero, "np_zeros": np.zeros}
class FakeNp:   # np with zeros -> empty, for adjoint.forward
    def __getattr__(self, k): return getattr(np, k)
    zeros = staticmethod(np.empty)
get, put = blas_threads._openblas()
def arm(name):
    Wm.single_threaded_blas = adjoint.single_threaded_blas = blas_threads.single_threaded_blas; put(2)
    if name == "blas ctx noop": Wm.single_threaded_blas = adjoint.single_threaded_blas = contextlib.nullcontext
    if name == "blas 1 for good": Wm.single_threaded_blas = adjoint.single_threaded_blas = contextlib.nullcontext; put(1)
    runtime.check_rows = orig["check_rows"]; Wm.all_finite = orig["all_finite"]; adjoint.zero = orig["zero"]; adjoint.np = np
    if name == "no check_rows": runtime.check_rows = lambda *a: None
    if name == "no all_finite": Wm.all_finite = lambda a: True
    if name == "no d_state zero": adjoint.zero = lambda a: None
    if name == "states empty": adjoint.np = FakeNp()
    if name == "minmax check":
        def mm(a):
            if a.dtype.kind == "f" and a.size:
                flat = a.reshape(-1)
                if np.isfinite(flat.min()) and np.isfinite(flat.max()):
                    return True
            return bool(np.all(np.isfinite(a)))
        Wm.all_finite = mm
    if name == "all four":
        runtime.check_rows = lambda *a: None; Wm.all_finite = lambda a: True; adjoint.zero = lambda a: None; adjoint.np = FakeNp()
arms = ["base", "no all_finite", "minmax check", "blas 1 for good"]
T = collections.defaultdict(list)
K = 20; i = 0
for r in range(int(os.environ.get("ROUNDS", 10))):
    for a in arms:
        arm(a)
        for k in range(K + 3):
            t = time.perf_counter()
            s.step(i); i += 1
            if k >= 3: T[a].append(time.perf_counter() - t)
arm("base")
base = np.median(T["base"])
for a in arms: print("%-18s %.3f ms  %+.3f" % (a, 1e3 * np.median(T[a]), 1e3 * (np.median(T[a]) - base)))
