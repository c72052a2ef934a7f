# ChildSumTreeLSTM (the zoo's defaults: inner_words=True, max_children=4; h = 150, x = 300) trained on SST batches of
# 25 through as_torch(sparse=True) + ct.optim.Adagrad (DGL's groups): the level pass's forward and backward times
# round by round, and the weights' largest magnitudes.  On SST no inner node has a word, so W_f (read only at inner
# nodes, on x = 0) gets no gradient and weight decay drives it toward 0; the backward then slows 4-5x (denormal
# floats).  FLUSH=1: torch.set_flush_denormal(True) first (FTZ/DAZ on this thread, which TVM's pool threads,
# started later, inherit).  Run from the repo root: python denormals.py childsum
import os, sys, time
os.environ.setdefault("TVM_NUM_THREADS", "2"); os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
import numpy as np, torch, cortex_tvm as ct
from cortex_tvm import adjoint_pass
torch.set_num_threads(2)
if os.environ.get("FLUSH"):
    print("flush denormals", torch.set_flush_denormal(True))
trees, vocab = ct.data.sst_sample()
m = ct.models.BY_NAME[sys.argv[1]](hidden_size=150, vocab_size=len(vocab), embed_size=300, seed=0)
c = m.compile(training=True)
times = {}
call = adjoint_pass.LevelPass.__call__
def timed(self, *a, **k):
    t = time.perf_counter(); r = call(self, *a, **k)
    times.setdefault((k.get("part"), self.last_run), []).append(time.perf_counter() - t); return r
adjoint_pass.LevelPass.__call__ = timed
rng = np.random.default_rng(0)
batches = [[trees[i] for i in rng.permutation(len(trees))[:25]] for _ in range(5)]
R = np.random.default_rng(1).standard_normal((25, 150)).astype(np.float32)
def report(label):
    print(label, {k: f"{1e3 * np.median(v[-10:]):.2f} ms x{len(v)}" for k, v in times.items()}); times.clear()
for _ in range(2):
    for b in batches: out, vjp = c.vjp(b); vjp(R, word_rows=True)
report("vjp word_rows")
module = c.as_torch(sparse=True)
Rt = torch.from_numpy(R)
for _ in range(2):
    for b in batches: (module(b) * Rt).sum().backward()
report("as_torch no optimizer")
params = dict(module.named_parameters())
opt = ct.optim.Adagrad([{"params": [v for k, v in params.items() if k != "emb"], "lr": 0.05, "weight_decay": 1e-4}, {"params": [params["emb"]], "lr": 0.005}])
for _ in range(2):
    for b in batches: opt.zero_grad(); (module(b) * Rt).sum().backward(); opt.step()
report("as_torch + Adagrad")
batches = [[trees[i] for i in rng.permutation(len(trees))[:25]] for _ in range(10)]
for r in range(8):
    for b in batches: opt.zero_grad(); (module(b) * Rt).sum().backward(); opt.step()
    report(f"round {r}")
    w = {k: v.detach().numpy() for k, v in params.items()}
    print("   max |w|", {k: f"{np.abs(v).max():.3g}" for k, v in w.items()}, "tiny", sum(int(((v != 0) & (np.abs(v) < 1e-30)).sum()) for v in w.values()))
    out = module(batches[0]).detach().numpy(); print("   |out| max", np.abs(out).max())
