"""TreeLSTM on SST in one process: fp32, bf16 storage only (store_bf16: this CPU with AVX512_BF16
turned off) and bf16 with vdpbf16ps (dot_bf16, the default of precision="bf16" on this CPU),
timed alternately round after round (best of 5 per batch, mean over 10 batches), so drift on a
shared VM hits all three.  `TVM_NUM_THREADS=2 python bf16_dot_ab.py 256 10 [rounds]` (H, batch)."""
import sys

import numpy as np
from tvm.target import codegen

import cortex_tvm as ct
from cortex_tvm.models import reference64
from cortex_tvm.timing import best_of

H, B = int(sys.argv[1]), int(sys.argv[2])
rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 7
trees, vocab = ct.data.sst_sample()
model = ct.models.TreeLSTM(hidden_size=H, vocab_size=len(vocab))
storage = {"kind": "llvm", "mcpu": codegen.llvm_get_system_cpu(), "mattr": ["-avx512bf16"]}
builds = {"fp32": model.compile(), "storage": model.compile(precision="bf16", target=storage),
          "dot": model.compile(precision="bf16")}
assert "dot_bf16" in [s["primitive"] for s in builds["dot"].trace]
assert "dot_bf16" not in [s["primitive"] for s in builds["storage"].trace]
batches = [trees[s:s + B] for s in np.linspace(0, len(trees) - B, 10).astype(int)]
for name, c in builds.items():
    err = max(float(np.abs(c(b) - reference64(model, b)).max()) for b in batches)
    print(f"{name}: max |roots - float64| {err:.2e}")
ratios = {"storage": [], "dot": []}
for r in range(rounds):
    t = {k: float(np.mean([best_of(c, b, 5) for b in batches])) for k, c in builds.items()}
    for k in ratios:
        ratios[k].append(t["fp32"] / t[k])
    print(f"round {r + 1}: fp32 {t['fp32'] * 1e3:.3f} ms, storage {t['storage'] * 1e3:.3f} ms, "
          f"dot {t['dot'] * 1e3:.3f} ms, fp32/storage {ratios['storage'][-1]:.3f}, fp32/dot {ratios['dot'][-1]:.3f}",
          flush=True)
for k, v in ratios.items():
    print(f"TreeLSTM H={H} batch {B}: fp32/{k} median {np.median(v):.3f}, range {min(v):.3f}-{max(v):.3f}"
          f" over {rounds} rounds")
