"""Interleaved A/B of module attributes: each variant 'module.ATTR=value[;module.ATTR=value]' ('' = as is)."""
import os, sys, time, importlib
os.environ.setdefault("TVM_NUM_THREADS", "2")
import numpy as np, cortex_tvm as ct
from cortex_tvm import adjoint_pass
trees, vocab = ct.data.sst_sample()
rng = np.random.default_rng(0)
B = int(sys.argv[1]); H = int(os.environ.get("H", "150")); X = int(os.environ.get("X", "300"))
model = ct.models.TreeLSTM(hidden_size=H, embed_size=X, vocab_size=len(vocab), seed=0)
builds = {}
for variant in sys.argv[2:]:
    saved = []
    for assign in filter(None, variant.split(";")):
        lhs, value = assign.split("=", 1)
        mod, attr = lhs.rsplit(".", 1)
        m = importlib.import_module("cortex_tvm." + mod)
        saved.append((m, attr, getattr(m, attr))); setattr(m, attr, eval(value))
    builds[variant] = model.compile(training=True)
    for m, attr, old in saved: setattr(m, attr, old)
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
    print(f"B={B} H={H} [{v or 'as is'}] " + "  ".join(f"{k} {1e3*x:.3f}" for k, x in b_.items()), flush=True)
