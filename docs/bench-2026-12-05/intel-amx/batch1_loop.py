import os, time, sys
os.environ.setdefault("TVM_NUM_THREADS", "2")
import numpy as np, cortex_tvm as ct
trees, vocab = ct.data.sst_sample()
model = ct.models.TreeLSTM(hidden_size=256, vocab_size=len(vocab), seed=0)
c = model.compile(precision=sys.argv[1])
lins = [c.linearize(trees[i:i + 1]) for i in range(0, 400, 40)]
print("levels", [l.num_levels for l in lins][:10], flush=True)
time.sleep(float(sys.argv[2]) if len(sys.argv) > 2 else 0)
t0 = time.time()
while time.time() - t0 < 6:
    for l in lins: c.run(l, check=False)
