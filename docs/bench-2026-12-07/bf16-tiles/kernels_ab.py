# The level pass's two calls, float32 against bf16, in one process (rounds alternating): TreeLSTM h = 150, x = 300,
# batch B of SST trees, the training step of ../step_setup.py; medians of each call's time over the rounds.
# From the repo root: PYTHONPATH=python python docs/bench-2026-12-07/bf16-tiles/kernels_ab.py [B] (ROUNDS=12 by default).
import os, sys, time
os.environ.setdefault("TVM_NUM_THREADS", "2"); os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import numpy as np, torch
torch.set_num_threads(2)
from step_setup import training_step
B = int(sys.argv[1]) if len(sys.argv) > 1 else 25
P = time.perf_counter
arms, times = {}, {}
for prec in ("fp32", "bf16"):
    made = training_step("treelstm", B, 150, 300, prec)
    lp = made.compiled.adjoint.level_pass
    times[prec] = {"forward": [], "backward": [], "step": []}
    def wrap(part, f, prec=prec):
        def g(*a):
            t = P(); r = f(*a); times[prec][part][-1] += P() - t; return r
        return g
    for key in list(lp._functions):
        lp._functions[key] = wrap(key[0], lp._functions[key])
    arms[prec] = made.step
for prec, step in arms.items():
    for i in range(30): times[prec]["forward"].append(0); times[prec]["backward"].append(0); step(i)
for prec in arms: times[prec] = {k: [] for k in times[prec]}
for r in range(int(os.environ.get("ROUNDS", 12))):
    for prec in (("fp32", "bf16") if r % 2 == 0 else ("bf16", "fp32")):
        t = times[prec]; t["forward"].append(0); t["backward"].append(0); start = P()
        for i in range(30): arms[prec](i)
        t["step"].append((P() - start) / 30); t["forward"][-1] /= 30; t["backward"][-1] /= 30
med = {p: {k: np.median(v) * 1e3 for k, v in t.items()} for p, t in times.items()}
for part in ("forward", "backward", "step"):
    print(f"B={B} {part:8s}: float32 {med['fp32'][part]:.3f} ms, bf16 {med['bf16'][part]:.3f} ms, "
          f"{med['fp32'][part] / med['bf16'][part]:.2f}x")
