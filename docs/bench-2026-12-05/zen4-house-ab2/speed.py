import json, os, sys, time
os.environ.setdefault("TVM_NUM_THREADS", "2")
import numpy as np
import cortex_tvm as ct
trees, vocab = ct.data.sst_sample()
out = {"code": os.path.dirname(ct.__file__)}
model = ct.models.TreeLSTM(hidden_size=256, vocab_size=len(vocab))
compiled = model.compile()
batches = [trees[i * 10:(i + 1) * 10] for i in range(10)]
def best(fn, n):
    t = []
    for _ in range(n):
        s = time.perf_counter(); fn(); t.append(time.perf_counter() - s)
    return min(t)
for b in batches: compiled(b)
out["infer_h256_b10_ms"] = 1e3 * np.mean([best(lambda: compiled(b), 20) for b in batches])
tm = ct.models.TreeLSTM(hidden_size=150, vocab_size=len(vocab))
tc = tm.compile(training=True)
rng = np.random.default_rng(0)
tb = [trees[100 + i * 25:100 + (i + 1) * 25] for i in range(6)]
d = [rng.standard_normal((25, 150)).astype(np.float32) for _ in tb]
def step(b, dd):
    o, pull = tc.vjp(b); g = pull(dd); del g
for b, dd in zip(tb, d): step(b, dd)
out["train_h150_b25_ms"] = 1e3 * np.mean([best(lambda: step(b, dd), 8) for b, dd in zip(tb, d)])
print(json.dumps(out))
