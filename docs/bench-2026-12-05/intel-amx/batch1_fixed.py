import os, time
os.environ.setdefault("TVM_NUM_THREADS", "2")
import numpy as np, cortex_tvm as ct
trees, vocab = ct.data.sst_sample()
model = ct.models.TreeLSTM(hidden_size=256, vocab_size=len(vocab), seed=0)
builds = {"fp32": model.compile(), "bf16": model.compile(precision="bf16")}
batch = [trees[i:i + 1] for i in range(0, 400, 40)]
for name, c in builds.items():
    lins = [c.linearize(b) for b in batch]
    for l in lins: c.run(l, check=False)
    best_call = best_lin = best_run = best_runc = 1e9
    for r in range(7):
        t0 = time.perf_counter()
        for b in batch: c(b)
        t1 = time.perf_counter()
        for b in batch: c.linearize(b)
        t2 = time.perf_counter()
        for l in lins: c.run(l, check=False)
        t3 = time.perf_counter()
        for l in lins: c.run(l)
        t4 = time.perf_counter()
        n = len(batch)
        best_call, best_lin, best_run, best_runc = min(best_call, (t1-t0)/n), min(best_lin, (t2-t1)/n), min(best_run, (t3-t2)/n), min(best_runc, (t4-t3)/n)
    print(f"{name}: call {1e6*best_call:.1f} us, linearize {1e6*best_lin:.1f} us, run(check=False) {1e6*best_run:.1f} us, run(check=True) {1e6*best_runc:.1f} us")
