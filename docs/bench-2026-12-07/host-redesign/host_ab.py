# A training step's host work, before and after the afternoon's host changes: run from a checkout's root,
# PYTHONPATH=python python host_ab.py MODEL BATCH PRECISION, in alternating processes of the two checkouts
# (the older one a git worktree of 93fc08b); TreeLSTM-style setup of ../step_setup.py (h = 150, x = 300,
# as_torch(sparse=True) + ct.optim.Adagrad in DGL's groups, 2 threads), 30 steps of warm-up, then 8 x 50 steps.
# Prints the step's median, the level pass's kernels inside it, and the rest (the host's work and Adagrad's loops).
import os, sys, time
os.environ.setdefault("TVM_NUM_THREADS", "2"); os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import numpy as np
from step_setup import training_step
name, B, prec = sys.argv[1], int(sys.argv[2]), sys.argv[3]
setup = training_step(name, B, 150, 300, prec)
step = setup.step
lp = setup.compiled.adjoint.level_pass
KT = [0.0]
for key, fn in list(lp._functions.items()):
    def timed(*a, fn=fn):
        t = time.perf_counter(); r = fn(*a); KT[0] += time.perf_counter() - t; return r
    lp._functions[key] = timed
for i in range(30): step(i)
ts, ks = [], []
for r in range(8):
    KT[0] = 0.0
    t = time.perf_counter()
    for i in range(50): step(i)
    ts.append((time.perf_counter() - t) / 50 * 1e3); ks.append(KT[0] / 50 * 1e3)
rest = np.array(ts) - np.array(ks)
print("%-6s %s B=%d %s: step %.3f ms (median of 8 x 50; %.3f-%.3f), kernels %.3f, the rest %.3f (%.3f-%.3f)" % (
    sys.argv[4] if len(sys.argv) > 4 else os.getcwd().split('/')[-1], name, B, prec, np.median(ts), min(ts), max(ts),
    np.median(ks), np.median(rest), rest.min(), rest.max()))
