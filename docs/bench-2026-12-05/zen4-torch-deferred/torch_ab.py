"""as_torch training steps: the kernel's weight layouts made at every load (before) against when
the kernel next runs (now), interleaved in one process.  usage: torch_ab.py H X B [rounds]"""
import json, os, sys, time
os.environ.setdefault("TVM_NUM_THREADS", "2")
import numpy as np, torch
import cortex_tvm as ct
from cortex_tvm import data
from cortex_tvm.bench.case_data import case_groups
torch.set_num_threads(2)
H, X, B = (int(a) for a in sys.argv[1:4])
rounds = int(sys.argv[4]) if len(sys.argv) > 4 else 10
trees, vocab = data.sst_sample()
_, groups = case_groups("treelstm", trees, B, 10)
variants = {}
for name in ("at load", "deferred"):
    model = ct.models.TreeLSTM(hidden_size=H, vocab_size=len(vocab), embed_size=X, seed=1)
    module = model.compile(training=True).as_torch()
    if name == "at load":                      # what load_weights did before: pad and pack at once
        sync = module._sync
        def eager(sync=sync, module=module):
            sync(); module.compiled._settle_weights()
        module._sync = eager
    head = torch.nn.Linear(H, 5)
    opt = torch.optim.Adagrad([*module.parameters(), *head.parameters()], lr=0.05, weight_decay=1e-4)
    variants[name] = (module, head, opt)
labels = [torch.arange(B) % 5 for _ in groups]
def step(v, i):
    module, head, opt = v
    opt.zero_grad()
    loss = torch.nn.functional.cross_entropy(head(module(groups[i])), labels[i])
    loss.backward(); opt.step()
best = {n: np.full(len(groups), np.inf) for n in variants}
for _ in range(rounds):
    for n, v in variants.items():
        for i in range(len(groups)):
            t = time.perf_counter(); step(v, i); best[n][i] = min(best[n][i], time.perf_counter() - t)
a, d = best["at load"].mean(), best["deferred"].mean()
print(json.dumps({"H": H, "x": X, "batch": B, "at_load_step_ms": round(a * 1e3, 3), "deferred_step_ms": round(d * 1e3, 3),
                  "at_load_over_deferred": round(a / d, 3)}), flush=True)
