# The optimizer's step alone, DGL's TreeLSTM groups at x = 300, h = 150 (W 450 x 300, U 750 x 300 and
# their biases with weight decay; the 5374 x 300 embedding without, its gradient ~400 sparse rows),
# gradients fixed: torch.optim.Adagrad (its default, single-tensor), torch's fused=True (dense groups
# only: it takes no sparse gradient) and cortex_tvm.optim.Adagrad.  2 threads, OMP_WAIT_POLICY=PASSIVE
# (as the bench's worker), min and median of 90 steps after 10.  Run from the repo root.
import os, time
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE"); os.environ.setdefault("TVM_NUM_THREADS", "2")
import numpy as np, torch
from cortex_tvm.optim import Adagrad
torch.set_num_threads(2)
DENSE = {"W": (450, 300), "bW": (450,), "U": (750, 300), "bU": (750,)}


def timed(optimizer, before=lambda: None):
    times = []
    for _ in range(100):
        before()
        start = time.perf_counter(); optimizer.step(); times.append(time.perf_counter() - start)
    return "min %.3f med %.3f ms" % (1e3 * min(times[10:]), 1e3 * np.median(times[10:]))


for kind in ("torch", "torch fused=True", "cortex_tvm.optim"):
    p = [torch.nn.Parameter(torch.randn(s)) for s in DENSE.values()]
    make = Adagrad if kind == "cortex_tvm.optim" else torch.optim.Adagrad
    options = {"fused": True} if "fused" in kind else {}
    optimizer = make(p, lr=0.05, weight_decay=1e-4, **options)
    for v in p:
        v.grad = torch.randn_like(v)
    print(f"{kind:18s} W, bW, U, bU (dense, decay)   {timed(optimizer)}")
rows = torch.from_numpy(np.unique(np.random.default_rng(0).integers(0, 5374, 400)))
for kind in ("torch", "cortex_tvm.optim"):
    emb = torch.nn.Parameter(torch.randn(5374, 300))
    optimizer = (Adagrad if kind == "cortex_tvm.optim" else torch.optim.Adagrad)([emb], lr=0.005)

    def sparse_grad():
        emb.grad = torch.sparse_coo_tensor(rows[None], torch.randn(len(rows), 300), emb.shape, is_coalesced=True)
    print(f"{kind:18s} emb, {len(rows)} sparse rows         {timed(optimizer, sparse_grad)}")
    emb.grad = torch.randn(5374, 300)
    print(f"{kind:18s} emb, dense                  {timed(optimizer)}")
