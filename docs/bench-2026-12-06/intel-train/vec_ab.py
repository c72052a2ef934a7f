"""Interleaved A/B: the backward's register tiles with 1 or 2 vectors a node (adjoint_nest.tile_vectors)."""
import os, sys, time
os.environ.setdefault("TVM_NUM_THREADS", "2")
import numpy as np, cortex_tvm as ct
from cortex_tvm import adjoint_pass
trees, vocab = ct.data.sst_sample()
rng = np.random.default_rng(0)
B = int(sys.argv[1]); H = int(os.environ.get("H", "150")); X = int(os.environ.get("X", "300"))
model = ct.models.TreeLSTM(hidden_size=H, embed_size=X, vocab_size=len(vocab), seed=0)
builds = {}
for v in (1, 2):
    adjoint_pass.tile_vectors = lambda info, v=v: v
    builds[v] = model.compile(training=True)
acc = {}
orig = adjoint_pass.LevelPass.__call__
def timed(self, lin, *a, part="all", **k):
    t0 = time.perf_counter(); r = orig(self, lin, *a, part=part, **k)
    acc[part] = acc.get(part, 0) + time.perf_counter() - t0; return r
adjoint_pass.LevelPass.__call__ = timed
batches = [[trees[i] for i in rng.permutation(len(trees))[:B]] for _ in range(max(4, 80 // B))]
best = {}
for rnd in range(int(os.environ.get("ROUNDS", "9"))):
    for v, c in builds.items():
        acc.clear(); t0 = time.perf_counter()
        for b in batches:
            out, vjp = c.vjp(b); vjp(np.ones_like(out))
        n = len(batches)
        cur = dict(step=(time.perf_counter() - t0) / n, fwd=acc["forward"] / n, bwd=acc["backward"] / n)
        b_ = best.setdefault(v, {})
        for k, x in cur.items(): b_[k] = min(b_.get(k, 1e9), x)
for v, b_ in best.items():
    print(f"B={B} H={H} vectors={v} " + "  ".join(f"{k} {1e3*x:.3f}" for k, x in b_.items()), flush=True)
