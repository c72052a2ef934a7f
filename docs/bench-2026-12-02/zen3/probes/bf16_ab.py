"""fp32 against precision="bf16", TreeLSTM on SST, in one process: the two builds timed
alternately, round after round (best of 5 per batch, mean over 10 batches), so drift on a
shared VM hits both.  `TVM_NUM_THREADS=2 python bf16_ab.py 256 10 [rounds]` (H, batch)."""
import sys

import numpy as np

import cortex_tvm as ct
from cortex_tvm.timing import best_of

H, B = int(sys.argv[1]), int(sys.argv[2])
rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 7
trees, vocab = ct.data.sst_sample()
model = ct.models.TreeLSTM(hidden_size=H, vocab_size=len(vocab))
builds = {"fp32": model.compile(), "bf16": model.compile(precision="bf16")}
batches = [trees[s:s + B] for s in np.linspace(0, len(trees) - B, 10).astype(int)]
for c in builds.values():
    for b in batches:
        c(b)
ratios = []
for r in range(rounds):
    t = {k: float(np.mean([best_of(c, b, 5) for b in batches])) for k, c in builds.items()}
    ratios.append(t["fp32"] / t["bf16"])
    print(f"round {r + 1}: fp32 {t['fp32'] * 1e3:.3f} ms, bf16 {t['bf16'] * 1e3:.3f} ms, fp32/bf16 {ratios[-1]:.3f}",
          flush=True)
print(f"TreeLSTM H={H} batch {B}: fp32/bf16 median {np.median(ratios):.3f}, range {min(ratios):.3f}-{max(ratios):.3f}"
      f" over {rounds} rounds")
