"""The training step (forward + pullback) of TreeLSTM fed per-node features, compiled level pass
against the numpy backward (what ran before it took features), in one process, interleaved call
by call; per batch the minimum over `repeats`, then the mean.  SST dev batches as the bench
draws them, seeded features (`node_features.seeded_batch`).
Usage: PYTHONPATH=python python ab.py H F B [repeats]"""
import json
import os
import sys
import time

os.environ.setdefault("TVM_NUM_THREADS", "2")
import numpy as np  # noqa: E402

from cortex_tvm import data, models  # noqa: E402
from cortex_tvm.bench.case_data import case_groups, train_direction  # noqa: E402
from cortex_tvm.node_features import seeded_batch  # noqa: E402

H, F, B = (int(a) for a in sys.argv[1:4])
repeats = int(sys.argv[4]) if len(sys.argv) > 4 else 10
trees, _ = data.sst_sample()
model = models.TreeLSTM(hidden_size=H, inputs="features", embed_size=F)
_, groups = case_groups("treelstm", trees, B, 10)
rows = [seeded_batch(g, F, seed=k).features for k, g in enumerate(groups)]
direction = train_direction(B, model.hidden_size)
compiled = model.compile(training=True)
level_pass = compiled.adjoint.level_pass
assert level_pass is not None


def step(g, x, compiled_pass):
    compiled.adjoint.level_pass = level_pass if compiled_pass else None
    out, pullback = compiled.vjp(g, features=x)
    return pullback(direction)


def timed(fn):
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


best = {True: [], False: []}
for g, x in zip(groups, rows):
    for variant in best:
        step(g, x, variant)
    mins = dict.fromkeys(best, float("inf"))
    for _ in range(repeats):
        for variant in best:
            mins[variant] = min(mins[variant], timed(lambda: step(g, x, variant)))
    for variant in best:
        best[variant].append(mins[variant])
compiled.adjoint.level_pass = level_pass
for variant, times in best.items():
    print(json.dumps({"backward": "compiled level pass" if variant else "numpy", "H": H, "F": F, "batch": B,
                      "repeats": repeats, "step_ms": round(float(np.mean(times)) * 1e3, 3)}), flush=True)
