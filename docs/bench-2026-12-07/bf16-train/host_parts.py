# Where a training step's time goes (TreeLSTM x = 300, h = 150, batch 25, as_torch(sparse=True) + ct.optim.Adagrad):
# per step, the median over 300 steps of opt.zero_grad(), the module's forward, loss.backward(), opt.step(), and the
# level pass's two kernel calls inside them (timed around each call).  python host_parts.py bf16|fp32; output host_parts.txt
import os, sys, time
os.environ.setdefault("TVM_NUM_THREADS", "2"); os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
import numpy as np, torch
import cortex_tvm as ct
torch.set_num_threads(2)
B = 25; H = 150
trees, vocab = ct.data.sst_sample()
model = ct.models.TreeLSTM(hidden_size=H, vocab_size=len(vocab), seed=0, embed_size=300)
compiled = model.compile(training=True, precision=sys.argv[1])
lp = compiled.adjoint.level_pass
KT = []
for key, fn in list(lp._functions.items()):
    def timed(*a, fn=fn):
        t = time.perf_counter(); r = fn(*a); KT.append(time.perf_counter() - t); return r
    lp._functions[key] = timed
m = compiled.as_torch(sparse=True)
params = dict(m.named_parameters())
rest = [v for k, v in params.items() if k != "emb"]
opt = ct.optim.Adagrad([{"params": rest, "lr": 0.05, "weight_decay": 1e-4}, {"params": [params["emb"]], "lr": 0.005}], target=compiled.target)
R = torch.from_numpy(np.random.default_rng(1).standard_normal((B, H)).astype(np.float32))
rng = np.random.default_rng(0)
batches = [[trees[i] for i in rng.permutation(len(trees))[:B]] for _ in range(10)]
T = {"zero": [], "fwd": [], "bwd": [], "opt": [], "kern": []}
for i in range(330):
    KT.clear()
    t0 = time.perf_counter(); opt.zero_grad(); t1 = time.perf_counter()
    out = m(batches[i % 10]); t2 = time.perf_counter()
    (out * R).sum().backward(); t3 = time.perf_counter()
    opt.step(); t4 = time.perf_counter()
    if i >= 30:
        for k, v in zip(T, (t1 - t0, t2 - t1, t3 - t2, t4 - t3, sum(KT))): T[k].append(v)
print(sys.argv[1], "  ".join("%s %.3f" % (k, 1e3 * np.median(v)) for k, v in T.items()), " total %.3f" % (1e3 * (np.median(T["zero"]) + np.median(T["fwd"]) + np.median(T["bwd"]) + np.median(T["opt"]))))
