# The training step, float32 against bf16, in one process (rounds alternating), for a zoo model at h = HIDDEN, x = 300:
# the setup of ../step_setup.py (as_torch(sparse=True) + ct.optim.Adagrad, 2 threads, 10 seeded SST batches of B).
# From the repo root: PYTHONPATH=python python docs/bench-2026-12-07/amx-train/models_ab.py MODEL HIDDEN B [ROUNDS]
import os, sys, time
os.environ.setdefault("TVM_NUM_THREADS", "2"); os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import numpy as np
from step_setup import training_step
name, hidden, B = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rounds = int(sys.argv[4]) if len(sys.argv) > 4 else 8
arms = {prec: training_step(name, B, hidden, 300, prec) for prec in ("fp32", "bf16")}
times = {prec: [] for prec in arms}
for prec, made in arms.items():
    for i in range(20): made.step(i)
for r in range(rounds):
    for prec in (("fp32", "bf16") if r % 2 == 0 else ("bf16", "fp32")):
        start = time.perf_counter()
        for i in range(20): arms[prec].step(i)
        times[prec].append((time.perf_counter() - start) / 20 * 1e3)
med = {p: float(np.median(t)) for p, t in times.items()}
print(f"{name} h={hidden} B={B}: float32 {med['fp32']:.3f} ms, bf16 {med['bf16']:.3f} ms a step "
      f"(medians of {rounds} rounds of 20), {med['fp32'] / med['bf16']:.2f}x; "
      f"amx={arms['bf16'].compiled.adjoint.level_pass.amx}")
