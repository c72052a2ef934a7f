# The bf16 (or float32) training step's phases and the kernels' share in them: the level pass's two calls and Adagrad's
# two loops wrapped with timers, 3 x 100 steps after 40 of warm-up; "host" = the step less the kernels.
# From the repo root: PYTHONPATH=python python docs/bench-2026-12-07/bf16-tiles/step_split.py B PRECISION
import os, sys, time, importlib
os.environ.setdefault("TVM_NUM_THREADS", "2"); os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import numpy as np, torch
torch.set_num_threads(2)
from step_setup import training_step
B = int(sys.argv[1]); prec = sys.argv[2]
made = training_step("treelstm", B, 150, 300, prec)
P = time.perf_counter
kt = {}
lp = made.compiled.adjoint.level_pass
def wrap(key, f):
    def g(*a):
        t = P(); r = f(*a); kt[key] = kt.get(key, 0) + P() - t; return r
    return g
for i in range(3): made.step(i)
for key in list(lp._functions):
    lp._functions[key] = wrap(key, lp._functions[key])
optm = importlib.import_module("cortex_tvm.optim")
d, r = optm._BUILT[made.opt._target]
optm._BUILT[made.opt._target] = (wrap("adagrad_dense", d), wrap("adagrad_rows", r))
m, opt, R, batches = made.module, made.opt, made.R, made.batches
acc = np.zeros(4)
def step(i, rec):
    t0 = P(); opt.zero_grad(); t1 = P()
    out = m(batches[i % 10]); t2 = P()
    (out * R).sum().backward(); t3 = P()
    opt.step(); t4 = P()
    if rec: acc[:] += (t1-t0, t2-t1, t3-t2, t4-t3)
for i in range(40): step(i, False)
for r in range(3):
    acc[:] = 0; kt.clear()
    for i in range(100): step(i, True)
    print("zero_grad %.3f forward %.3f backward %.3f opt %.3f total %.3f ms" % tuple(list(acc/100*1e3) + [acc.sum()/100*1e3]),
          {str(k): round(v * 10, 3) for k, v in kt.items()}, "host %.3f" % ((acc.sum() - sum(kt.values())) * 10))
