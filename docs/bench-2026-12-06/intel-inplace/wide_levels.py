# Loop efficiency without small levels: complete binary trees (few, wide levels) against SST batches,
# the training forward and the pullback alone, GFLOP/s by the same count as the bench (useful forward
# FLOPs; backward 2x), TreeLSTM x = 300, h = 150, 2 threads.
import os, time
os.environ.setdefault("TVM_NUM_THREADS", "2")
import numpy as np, cortex_tvm as ct
trees, vocab = ct.data.sst_sample()
H, X = 150, 300
model = ct.models.TreeLSTM(hidden_size=H, embed_size=X, vocab_size=len(vocab), seed=0)
c = model.compile(training=True)
rng = np.random.default_rng(0)
def complete(depth):
    if depth == 0: return ct.data.Node(word=int(rng.integers(len(vocab))))
    return ct.data.Node(children=[complete(depth - 1), complete(depth - 1)])
def flops(batch):
    leaves = internal = 0
    for t in batch:
        for n in ct.data.postorder(t):
            if n.children: internal += 1
            else: leaves += 1
    return 2 * (internal * 5 * H * 2 * H + leaves * 3 * H * X)
cases = {"SST batch of 25": [[trees[i] for i in rng.permutation(len(trees))[:25]] for _ in range(5)],
         "32 complete trees of depth 4 (levels 512..32)": [[complete(4) for _ in range(32)] for _ in range(5)],
         "4 complete trees of depth 8": [[complete(8) for _ in range(4)] for _ in range(3)]}
lp = c.adjoint.level_pass
acc = {}
orig = lp.function
def function(part, parallel):
    f = orig(part, parallel)
    def timed(*a):
        t = time.perf_counter(); f(*a); acc.setdefault(part, []).append(time.perf_counter() - t)
    return timed
lp.function = function
for name, batches in cases.items():
    fw, bw, fl = [], [], []
    for b in batches:
        R = np.ones((len(b), H), np.float32)
        for _ in range(3):
            acc.clear(); out, pb = c.vjp(b); pb(R)
        best_f = min(acc["forward"]); best_b = min(acc["backward"])
        fw.append(best_f); bw.append(best_b); fl.append(flops(b))
    print(f"{name:48s} fwd {np.sum(fl)/np.sum(fw)/1e9:6.1f} GFLOP/s  bwd {2*np.sum(fl)/np.sum(bw)/1e9:6.1f} GFLOP/s"
          f"  ({np.mean(fl)/1e6:.0f} MFLOP a batch, fwd {1e3*np.mean(fw):.2f} ms, bwd {1e3*np.mean(bw):.2f} ms)")
