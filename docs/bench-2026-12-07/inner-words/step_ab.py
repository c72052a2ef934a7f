# The training step of a model whose inner nodes may lack a word: the commit before the compiled gather of
# emb[min(word, V-1)] and the if_then_else rule ("old", a git worktree of 9b2e937) against it ("main"), in
# alternating processes; from each checkout's root: PYTHONPATH=python python step_ab.py MODEL BATCH fp32
# (h = 150, x = 300, as_torch(sparse=True) + ct.optim.Adagrad, 30 steps of warm-up, then 8 x 50 steps).
import os, sys, time
os.environ.setdefault("TVM_NUM_THREADS", "2"); os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
import numpy as np, torch
import cortex_tvm as ct
torch.set_num_threads(2)
name, B, prec = sys.argv[1], int(sys.argv[2]), sys.argv[3]
H = 150
trees, vocab = ct.data.sst_sample()
model = ct.models.BY_NAME[name](hidden_size=H, vocab_size=len(vocab), seed=0, embed_size=300)
compiled = model.compile(training=True, precision=prec)
lp = compiled.adjoint.level_pass
KT = [0.0]
for key, fn in list(lp._functions.items()):
    def timed(*a, fn=fn):
        t = time.perf_counter(); r = fn(*a); KT[0] += time.perf_counter() - t; return r
    lp._functions[key] = timed
m = compiled.as_torch(sparse=True)
params = dict(m.named_parameters())
rest = [v for k, v in params.items() if k != "emb"]
opt = ct.optim.Adagrad([{"params": rest, "lr": 0.05, "weight_decay": 1e-4}, {"params": [params["emb"]], "lr": 0.005}], target=compiled.target)
R = torch.from_numpy(np.random.default_rng(1).standard_normal((B, H)).astype(np.float32))
rng = np.random.default_rng(0)
batches = [[trees[i] for i in rng.permutation(len(trees))[:B]] for _ in range(10)]
def step(i):
    opt.zero_grad(); out = m(batches[i % 10]); (out * R).sum().backward(); opt.step()
for i in range(30): step(i)
ts, ks = [], []
for r in range(8):
    KT[0] = 0.0
    t = time.perf_counter()
    for i in range(50): step(i)
    ts.append((time.perf_counter() - t) / 50 * 1e3); ks.append(KT[0] / 50 * 1e3)
print("%s %s B=%d %s: %.3f ms/step (median of 8 x 50; %.3f-%.3f), level pass kernels %.3f ms, the rest %.3f" % (os.getcwd().split('/')[-1], name, B, prec, np.median(ts), min(ts), max(ts), np.median(ks), np.median(np.array(ts) - np.array(ks))))
