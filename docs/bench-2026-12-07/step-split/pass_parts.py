# The level pass's "forward" and "backward" calls timed alone (vjp + pullback in a loop, no torch, no optimizer): python pass_parts.py BATCH
import os, sys, time
os.environ.setdefault("TVM_NUM_THREADS", "2")
import numpy as np, cortex_tvm as ct
from cortex_tvm import adjoint_pass
trees, vocab = ct.data.sst_sample()
B = int(sys.argv[1])
model = ct.models.TreeLSTM(hidden_size=150, embed_size=300, vocab_size=len(vocab), seed=0)
c = model.compile(training=True)
rng = np.random.default_rng(0)
batches = [[trees[i] for i in rng.permutation(len(trees))[:B]] for _ in range(10)]
times = {"forward": [], "backward": []}
orig = adjoint_pass.LevelPass.__call__
def timed(self, *a, **k):
    t = time.perf_counter(); r = orig(self, *a, **k); times[k.get("part", "all")].append(time.perf_counter() - t); return r
adjoint_pass.LevelPass.__call__ = timed
R = np.random.default_rng(1).standard_normal((B, 150)).astype(np.float32)
W = c.training_weights
for mode in ("same weights", "weights rewritten", "same weights", "weights rewritten"):
    for k in times: times[k].clear()
    for rep in range(30):
        for b in batches:
            if mode == "weights rewritten":
                for name, w in W.items():
                    if name != "emb": w += 0.0
            out, pb = c.vjp(b); pb(R)
    print(f"B={B} {mode:18s} forward pass {1e3*np.median(times['forward']):.3f} ms  backward pass {1e3*np.median(times['backward']):.3f} ms")
