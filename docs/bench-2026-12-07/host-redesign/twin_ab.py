# A training step of two versions of the package in ONE process, rounds alternating (the VM's speed moves by up to
# 1.8x between processes minutes apart; within a process both arms see the same phases): the older checkout's
# python/cortex_tvm copied to a temporary folder as `cortex_tvm_old` (its lazy imports renamed), against this one.
# From the repo root:
#   PYTHONPATH=python python docs/bench-2026-12-07/host-redesign/twin_ab.py OLD_CHECKOUT B PRECISION [stub]
# (OLD_CHECKOUT: e.g. a `git worktree add` of 93fc08b).  TreeLSTM h = 150, x = 300, as_torch(sparse=True) +
# ct.optim.Adagrad in DGL's groups (../step_setup.py), 2 threads, 10 seeded SST batches of B; 30 steps of warm-up
# per arm, then ROUNDS (default 16) rounds of 30 steps per arm.  MODEL (a zoo name) and HIDDEN in the environment
# time another model or width (bf16-tiles/twin_ab.txt).  "stub": every kernel (the level pass's and
# Adagrad's) a no-op, so the step is the host's work alone.
import os, shutil, sys, tempfile, time
os.environ.setdefault("TVM_NUM_THREADS", "2"); os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
old_root, B, prec = sys.argv[1], int(sys.argv[2]), sys.argv[3]
STUB = len(sys.argv) > 4 and sys.argv[4] == "stub"
MODEL, HIDDEN = os.environ.get("MODEL", "treelstm"), int(os.environ.get("HIDDEN", 150))
twin = tempfile.mkdtemp()
shutil.copytree(os.path.join(old_root, "python", "cortex_tvm"), os.path.join(twin, "cortex_tvm_old"))
init = os.path.join(twin, "cortex_tvm_old", "__init__.py")
with open(init) as f:
    text = f.read().replace('("cortex_tvm.', '("cortex_tvm_old.')
with open(init, "w") as f:
    f.write(text)
sys.path.insert(0, twin)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import importlib
import numpy as np
import torch
torch.set_num_threads(2)
import cortex_tvm as new
import cortex_tvm_old as old
from step_setup import training_step


def setup(ct):
    made = training_step(MODEL, B, HIDDEN, 300, prec, package=ct)
    if STUB:
        level_pass = made.compiled.adjoint.level_pass
        for key in list(level_pass._functions):
            level_pass._functions[key] = lambda *a: None
        importlib.import_module(ct.__name__ + ".optim")._BUILT[made.opt._target] = (lambda *a: None, lambda *a: None)
    return made.step


arms = {"old": setup(old), "new": setup(new)}
for step in arms.values():
    for i in range(30):
        step(i)
times = {k: [] for k in arms}
for r in range(int(os.environ.get("ROUNDS", 16))):
    for k in (("old", "new") if r % 2 == 0 else ("new", "old")):
        start = time.perf_counter()
        for i in range(30):
            arms[k](i)
        times[k].append((time.perf_counter() - start) / 30 * 1e3)
o, n = np.array(times["old"]), np.array(times["new"])
print(("" if MODEL == "treelstm" and HIDDEN == 150 else f"{MODEL} h={HIDDEN} ") + "B=%d %s%s: old %.3f ms, new %.3f ms a step (medians of %d rounds of 30), %+.3f ms (%+.1f%%), "
      "new faster in %d of %d rounds" % (B, prec, " host alone (kernels no-ops)" if STUB else "", np.median(o),
                                         np.median(n), len(o), np.median(n) - np.median(o),
                                         100 * (np.median(n) / np.median(o) - 1), int((n < o).sum()), len(o)))
