import os, sys, time
import numpy as np, torch, resource
sys.path.insert(0, "python/cortex_tvm/bench")  # (run from the repository root)
from torch_worker import make_optimizer
torch.set_num_threads(int(os.environ.get("TT", "2")))
spec = {"kind": "adagrad", "lr": 0.05, "weight_decay": 1e-4, "tables": ["emb"], "table_lr": 0.005}
shapes = {"emb": (5374, 300), "W": (450, 300), "bW": (450,), "U": (750, 300), "bU": (750,)}
p = {k: torch.nn.Parameter(torch.randn(s) * 0.1) for k, s in shapes.items()}
opt = make_optimizer(p, spec)
for k in p: p[k].grad = torch.randn(shapes[k]) * 0.01
ts = []
for i in range(50):
    f0=resource.getrusage(resource.RUSAGE_SELF).ru_minflt; t0 = time.perf_counter(); opt.step(); ts.append(time.perf_counter() - t0); fl=resource.getrusage(resource.RUSAGE_SELF).ru_minflt-f0
print("faults/step", fl, os.environ.get("OMP_WAIT_POLICY"), "opt.step min %.3f med %.3f ms" % (1e3 * min(ts), 1e3 * np.median(ts)))
