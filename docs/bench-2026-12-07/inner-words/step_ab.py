# The training step of a model whose inner nodes may lack a word: the commit before the compiled gather of
# emb[min(word, V-1)] and the if_then_else rule ("old", a git worktree of 9b2e937) against it ("main"), in
# alternating processes; from each checkout's root: PYTHONPATH=python python step_ab.py MODEL BATCH fp32
# (h = 150, x = 300, as_torch(sparse=True) + ct.optim.Adagrad, 30 steps of warm-up, then 8 x 50 steps).
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
print("%s %s B=%d %s: %.3f ms/step (median of 8 x 50; %.3f-%.3f), level pass kernels %.3f ms, the rest %.3f" % (os.getcwd().split('/')[-1], name, B, prec, np.median(ts), min(ts), max(ts), np.median(ks), np.median(np.array(ts) - np.array(ks))))
