# vjp's forward (argv[1] "fwd"; "both": and its pullback) in a loop for argv[2] seconds, the level pass exported
# to /tmp/q/{forward,backward}.so so that perf can read its code: run from the repo root as
#   PYTHONPATH=python perf record -D 30000 -o perf2.data .venv/bin/python forward_perf.py fwd 45
# (-D: past the compile), then forward_perf.txt's histogram from perf script -F ip,dso.
import os, sys, time, gc
os.environ.setdefault("TVM_NUM_THREADS", "2"); os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
import numpy as np, cortex_tvm as ct, tvm
from cortex_tvm import adjoint_pass, tir_pipeline
from cortex_tvm.adjoint_kernel import NAMES
trees, vocab = ct.data.sst_sample()
model = ct.models.TreeLSTM(hidden_size=150, embed_size=300, vocab_size=len(vocab), seed=0)
c = model.compile(training=True)
lp = [o for o in gc.get_objects() if isinstance(o, adjoint_pass.LevelPass)][0]
for part in ("forward", "backward"):
    func, _ = lp.build(part, True); name = NAMES[part][True]
    ex = tvm.compile(tvm.IRModule({name: func}), target=lp.target, tir_pipeline=tir_pipeline.NAME)
    ex.export_library(f"/tmp/q/{part}.so")
    lp._functions[(part, True)] = tvm.runtime.load_module(f"/tmp/q/{part}.so")[name]
rng = np.random.default_rng(0); B = 25
batches = [[trees[i] for i in rng.permutation(len(trees))[:B]] for _ in range(10)]
R = np.random.default_rng(1).standard_normal((B, 150)).astype(np.float32)
mode = sys.argv[1]
t = time.perf_counter(); n = 0
while time.perf_counter() - t < float(sys.argv[2]):
    for b in batches:
        out, pb = c.vjp(b)
        if mode == "both": pb(R)
        n += 1
print(n, "steps", (time.perf_counter()-t)/n*1e3, "ms")
