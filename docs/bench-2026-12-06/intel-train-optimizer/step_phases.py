# One process: TreeLSTM x = 300, h = 150 through as_torch() and torch.optim.Adagrad (DGL groups), each
# part of a step timed: best of ROUNDS rounds over 10 batches of B trees (argv[1]); SPARSE=1: sparse
# embedding gradients; ffwd/fbwd/fopt: minor page faults per step (thousands). Run from the repo root.
import os, sys, time
os.environ.setdefault("TVM_NUM_THREADS", "2"); os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
import numpy as np, torch, cortex_tvm as ct, resource
flt=lambda: resource.getrusage(resource.RUSAGE_SELF).ru_minflt

def make_optimizer(p, s):
    return torch.optim.Adagrad([{"params": [v for k, v in p.items() if k != "emb"], "lr": 0.05, "weight_decay": 1e-4}, {"params": [p["emb"]], "lr": 0.005}])
TRAIN_OPTIMIZER = None
torch.set_num_threads(int(os.environ.get("TT", "2")))
trees, vocab = ct.data.sst_sample()
rng = np.random.default_rng(0)
B = int(sys.argv[1]) if len(sys.argv) > 1 else 25
model = ct.models.TreeLSTM(hidden_size=150, embed_size=300, vocab_size=len(vocab), seed=0)
c = model.compile(training=True)
m = c.as_torch(sparse=bool(int(os.environ.get("SPARSE", "0"))))
params = dict(m.named_parameters())
opt = make_optimizer(params, TRAIN_OPTIMIZER)
R = torch.from_numpy(np.random.default_rng(1).standard_normal((B, 150)).astype(np.float32))
batches = [[trees[i] for i in rng.permutation(len(trees))[:B]] for _ in range(10)]
best = {}
for rnd in range(int(os.environ.get("ROUNDS", "5"))):
    acc = dict(fwd=0, bwd=0, opt=0, step=0)
    for b in batches:
        for p in params.values(): p.grad = None
        f0=flt(); t0 = time.perf_counter(); out = m(b); t1 = time.perf_counter(); f1=flt()
        (out * R).sum().backward(); t2 = time.perf_counter(); f2=flt()
        opt.step(); t3 = time.perf_counter(); f3=flt()
        acc.setdefault("ffwd",0); acc.setdefault("fbwd",0); acc.setdefault("fopt",0)
        acc["ffwd"]+=(f1-f0)*1e-3; acc["fbwd"]+=(f2-f1)*1e-3; acc["fopt"]+=(f3-f2)*1e-3
        acc["fwd"] += t1 - t0; acc["bwd"] += t2 - t1; acc["opt"] += t3 - t2; acc["step"] += t3 - t0
    for k, v in acc.items(): best[k] = min(best.get(k, 1e9), v / len(batches))
print(f"B={B} sparse={os.environ.get('SPARSE','0')} " + "  ".join(f"{k} {1e3*v:.3f}" for k, v in best.items()))
