import os, sys, time
os.environ.setdefault("TVM_NUM_THREADS", "2")
import numpy as np, cortex_tvm as ct
from cortex_tvm import adjoint_pass
trees, vocab = ct.data.sst_sample()
rng = np.random.default_rng(0)
B = int(sys.argv[1]) if len(sys.argv) > 1 else 25
model = ct.models.TreeLSTM(hidden_size=150, embed_size=300, vocab_size=len(vocab), seed=0)
from cortex_tvm import adjoint_nest
adjoint_nest.SUMS_IN_FLIGHT = int(os.environ.get("SUMS", "8"))
c = model.compile(training=True, target={"kind": "llvm", "mcpu": os.environ["MCPU"]} if os.environ.get("MCPU") else "llvm")
batches = [[trees[i] for i in rng.permutation(len(trees))[:B]] for _ in range(max(4, 80 // B))]
acc = {}
orig = adjoint_pass.LevelPass.__call__
def timed(self, lin, *a, part="all", **k):
    t0 = time.perf_counter(); r = orig(self, lin, *a, part=part, **k)
    acc[part] = acc.get(part, 0) + time.perf_counter() - t0; return r
adjoint_pass.LevelPass.__call__ = timed
best = {}
for rnd in range(6):
    acc.clear(); tf = tb = 0
    for b in batches:
        t0 = time.perf_counter(); out, vjp = c.vjp(b); t1 = time.perf_counter()
        vjp(np.ones_like(out)); t2 = time.perf_counter()
        tf += t1 - t0; tb += t2 - t1
    n = len(batches)
    cur = dict(vjp=tf / n, pullback=tb / n, **{k: v / n for k, v in acc.items()})
    for k, v in cur.items(): best[k] = min(best.get(k, 1e9), v)
print(f"B={B} " + "  ".join(f"{k} {1e3*v:.3f}" for k, v in best.items()))
