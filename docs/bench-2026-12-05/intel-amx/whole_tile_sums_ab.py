import os, sys, time
os.environ.setdefault("TVM_NUM_THREADS", "2")
import numpy as np, cortex_tvm as ct
from cortex_tvm import adjoint_nest
trees, vocab = ct.data.sst_sample()
rng = np.random.default_rng(0)
values = [int(v) for v in sys.argv[1].split(",")]
B = int(sys.argv[2]) if len(sys.argv) > 2 else 25
H = int(sys.argv[3]) if len(sys.argv) > 3 else 150
model = ct.models.TreeLSTM(hidden_size=H, embed_size=300, vocab_size=len(vocab), seed=0)
builds = {}
for v in values:
    adjoint_nest.WHOLE_TILE_SUMS = v
    builds[v] = model.compile(training=True)
batches = [[trees[i] for i in rng.permutation(len(trees))[:B]] for _ in range(max(4, 80 // B))]
best = {}
for rnd in range(5):
    for v, c in builds.items():
        t0 = time.perf_counter()
        for b in batches:
            out, vjp = c.vjp(b)
            vjp(np.ones_like(out))
        best[v] = min(best.get(v, 1e9), (time.perf_counter() - t0) / len(batches))
print(f"H={H} B={B}: " + ", ".join(f"whole-tile sums {v}: {1e3 * t:.3f} ms" for v, t in best.items()), flush=True)
