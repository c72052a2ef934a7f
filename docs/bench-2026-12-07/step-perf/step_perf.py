# the training step (as_torch(sparse=True) + ct.optim.Adagrad) in a loop, the level pass exported so perf sees its code
# usage: step_perf.py BATCH SECONDS [PRECISION: fp32 (default) or bf16];
# it writes /tmp/q/{forward,backward}.so and /tmp/q/ready
import os, sys, time, gc
os.environ.setdefault("TVM_NUM_THREADS", "2"); os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
import numpy as np, torch, cortex_tvm as ct, tvm
from cortex_tvm import adjoint_pass, tir_pipeline
from cortex_tvm.adjoint_kernel import NAMES
torch.set_num_threads(2)
trees, vocab = ct.data.sst_sample()
B = int(sys.argv[1])
model = ct.models.TreeLSTM(hidden_size=150, embed_size=300, vocab_size=len(vocab), seed=0)
c = model.compile(training=True, precision=sys.argv[3] if len(sys.argv) > 3 else "fp32")  # (2026-12-07, evening)
lp = c.adjoint.level_pass
for part in ("forward", "backward"):
    func, _ = lp.build(part, True); name = NAMES[part][True]
    ex = tvm.compile(tvm.IRModule({name: func}), target=lp.target, tir_pipeline=tir_pipeline.NAME)
    ex.export_library(f"/tmp/q/{part}.so")
    lp._functions[(part, True)] = tvm.runtime.load_module(f"/tmp/q/{part}.so")[name]
module = c.as_torch(sparse=True)
params = dict(module.named_parameters())
opt = ct.optim.Adagrad([{"params": [v for k, v in params.items() if k != "emb"], "lr": 0.05, "weight_decay": 1e-4},
                        {"params": [params["emb"]], "lr": 0.005}])
R = torch.from_numpy(np.random.default_rng(1).standard_normal((B, 150)).astype(np.float32))
rng = np.random.default_rng(0)
batches = [[trees[i] for i in rng.permutation(len(trees))[:B]] for _ in range(10)]
def step(b):
    opt.zero_grad(); (module(b) * R).sum().backward(); opt.step()
for b in batches * 5: step(b)
open("/tmp/q/ready", "w").write(str(os.getpid()))
t = time.perf_counter(); n = 0
while time.perf_counter() - t < float(sys.argv[2]):
    for b in batches: step(b); n += 1
print(n, "steps", (time.perf_counter() - t) / n * 1e3, "ms")
