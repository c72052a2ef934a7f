"""Three variants of the training pass, interleaved call by call (this VM's speed drifts 10-30% within
seconds): for each batch, each variant's step, then its pullback alone, in turn, `repeats`
times; per batch and variant the minimum, then the mean over batches.
Usage: PYTHONPATH=python python ab_interleaved.py H X B [repeats]"""
import json
import os
import sys
import time

os.environ.setdefault("TVM_NUM_THREADS", "2")
import numpy as np  # noqa: E402

from cortex_tvm import adjoint_weights, data, models  # noqa: E402
from cortex_tvm.bench.case_data import case_groups, train_direction  # noqa: E402

H, X, B = (int(a) for a in sys.argv[1:4])
repeats = int(sys.argv[4]) if len(sys.argv) > 4 else 20
trees, vocab = data.sst_sample()
model = models.TreeLSTM(hidden_size=H, vocab_size=len(vocab), embed_size=X)
_, groups = case_groups("treelstm", trees, B, 10)
direction = train_direction(B, model.hidden_size)
original = adjoint_weights.vectors_per_tile
variants = {}
for name, distinct, vectors in (("every leaf, 1-vector tiles", False, 1), ("distinct leaves, 1-vector tiles", True, 1),
                                ("distinct leaves, vectors_per_tile", True, None)):
    adjoint_weights.vectors_per_tile = original if vectors is None else (lambda r, v=vectors: v)
    compiled = model.compile(training=True)
    for part in ("forward", "backward"):
        compiled.adjoint.level_pass.function(part, True)
    compiled.adjoint.distinct_leaves = distinct
    variants[name] = compiled
adjoint_weights.vectors_per_tile = original


def timed(fn):
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


steps = {name: [] for name in variants}
pullbacks = {name: [] for name in variants}
for g in groups:
    best_step = dict.fromkeys(variants, float("inf"))
    best_pull = dict.fromkeys(variants, float("inf"))
    for _ in range(repeats):
        for name, compiled in variants.items():
            best_step[name] = min(best_step[name], timed(lambda: compiled.vjp(g)[1](direction)))
            pullback = compiled.vjp(g)[1]
            best_pull[name] = min(best_pull[name], timed(lambda: pullback(direction)))
    for name in variants:
        steps[name].append(best_step[name])
        pullbacks[name].append(best_pull[name])
for name in variants:
    print(json.dumps({"variant": name, "H": H, "x": X, "batch": B, "repeats": repeats,
                      "step_ms": round(np.mean(steps[name]) * 1e3, 3),
                      "pullback_ms": round(np.mean(pullbacks[name]) * 1e3, 3)}), flush=True)
