# The bf16 training pass against the float64 emulation (tests/training/eager.py's Bf16Product) and the exact float64
# gradients, TreeLSTM h = 16, 20 SST trees, loss at the roots; run from the repo root. Output: emulation.txt

import sys; sys.path.insert(0, "tests/training")
import numpy as np, torch, cortex_tvm as ct
from eager import EagerTreeLSTM
trees, vocab = ct.data.sst_sample(); trees = trees[:20]; H = 16
model = ct.models.TreeLSTM(H, len(vocab), seed=5)
bf = model.compile(training=True, precision="bf16"); fp = model.compile(training=True)
d = np.random.default_rng(3).standard_normal((len(trees), H))
def eg(bf16):
    e = EagerTreeLSTM(model.weights, bf16=bf16); (e(trees)[0] * torch.tensor(d)).sum().backward()
    return {k: p.grad.numpy() for k, p in e.named_parameters()}
got = bf.vjp(trees)[1](d.astype(np.float32)); f32 = fp.vjp(trees)[1](d.astype(np.float32))
em, ex = eg(True), eg(False)
for k in ex:
    s = np.abs(ex[k]).max()
    print(k, "got-em %.1e got-ex %.1e em-ex %.1e f32-ex %.1e" % (np.abs(got[k]-em[k]).max()/s, np.abs(got[k]-ex[k]).max()/s, np.abs(em[k]-ex[k]).max()/s, np.abs(f32[k]-ex[k]).max()/s))
