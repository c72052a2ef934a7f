"""In-process A/B of the training step (forward + pullback, TreeLSTM, SST dev batches as the
bench draws them): the old code's layout (every leaf computed, weight-sum tiles of 1 vector)
against each leaf's word once and against that with tiles of 3 vectors; every variant compiled
in this process, timed in turn, rounds alternating; per batch the best of 8, then the mean.
Usage: PYTHONPATH=python python ab.py H X B [rounds]"""
import json
import os
import sys
import time

os.environ.setdefault("TVM_NUM_THREADS", "2")
import numpy as np  # noqa: E402

from cortex_tvm import adjoint_weights, data, models  # noqa: E402
from cortex_tvm.bench.case_data import case_groups, train_direction  # noqa: E402

H, X, B = (int(a) for a in sys.argv[1:4])
rounds = int(sys.argv[4]) if len(sys.argv) > 4 else 3
trees, vocab = data.sst_sample()
model = models.TreeLSTM(hidden_size=H, vocab_size=len(vocab), embed_size=X)
_, groups = case_groups("treelstm", trees, B, 10)
direction = train_direction(B, model.hidden_size)
original = adjoint_weights.vectors_per_tile
variants = {}
for name, distinct, vectors in (("every leaf, 1-vector tiles", False, 1), ("distinct leaves, 1-vector tiles", True, 1),
                                ("distinct leaves, vectors_per_tile", True, None)):
    adjoint_weights.vectors_per_tile = original if vectors is None else (lambda r, v=vectors: v)
    start = time.perf_counter()
    compiled = model.compile(training=True)
    for part in ("forward", "backward"):
        compiled.adjoint.level_pass.function(part, True)
    compiled.adjoint.distinct_leaves = distinct
    variants[name] = (compiled, round(time.perf_counter() - start, 1))
adjoint_weights.vectors_per_tile = original


def best(fn, n=8):
    out = float("inf")
    for _ in range(n):
        t = time.perf_counter()
        fn()
        out = min(out, time.perf_counter() - t)
    return out


def step(compiled, g):
    return compiled.vjp(g)[1](direction)


for compiled, _ in variants.values():
    for g in groups:
        step(compiled, g)
for r in range(rounds):
    for name, (compiled, compile_s) in variants.items():
        steps = [best(lambda: step(compiled, g)) for g in groups]
        forward = [best(lambda: compiled.vjp(g)) for g in groups]
        print(json.dumps({"round": r, "variant": name, "H": H, "x": X, "batch": B, "step_ms": round(np.mean(steps) * 1e3, 3),
                          "forward_ms": round(np.mean(forward) * 1e3, 3), "compile_s": compile_s}), flush=True)
