"""Column shares vs node runs for the training pass's contractions (`adjoint_emit.splits_columns`:
the forward's and, in the first runs, the backward levels'), interleaved call by call.
Usage: PYTHONPATH=python python ab.py H X B [repeats] [groups]"""
import json, os, sys, time
os.environ.setdefault("TVM_NUM_THREADS", "2")
import numpy as np
from cortex_tvm import adjoint_emit, data, models
from cortex_tvm.bench.case_data import case_groups, train_direction

H, X, B = (int(a) for a in sys.argv[1:4])
repeats = int(sys.argv[4]) if len(sys.argv) > 4 else 15
ngroups = int(sys.argv[5]) if len(sys.argv) > 5 else 10
trees, vocab = data.sst_sample()
MODEL = os.environ.get("MODEL", "treelstm")
model = (models.TreeLSTM(hidden_size=H, vocab_size=len(vocab), embed_size=X) if MODEL == "treelstm"
         else models.BY_NAME[MODEL](hidden_size=H, vocab_size=len(vocab)))
_, groups = case_groups(MODEL, trees, B, ngroups)
direction = train_direction(B, model.hidden_size)
original = adjoint_emit.splits_columns
variants = {}
for name, on in (("node runs", False), ("column shares", True)):
    adjoint_emit.splits_columns = original if on else (lambda *a, **k: False)
    compiled = model.compile(training=True, target=json.loads(os.environ.get("TARGET", "\"llvm\"")))
    for part in ("forward", "backward"):
        compiled.adjoint.level_pass.function(part, True)
    variants[name] = compiled
adjoint_emit.splits_columns = original

def timed(fn):
    t = time.perf_counter(); fn(); return time.perf_counter() - t

steps = {n: [] for n in variants}; pulls = {n: [] for n in variants}
for g in groups:
    bs = dict.fromkeys(variants, float("inf")); bp = dict.fromkeys(variants, float("inf"))
    for _ in range(repeats):
        for name, c in variants.items():
            bs[name] = min(bs[name], timed(lambda: c.vjp(g)[1](direction)))
            pull = c.vjp(g)[1]
            bp[name] = min(bp[name], timed(lambda: pull(direction)))
    for n in variants:
        steps[n].append(bs[n]); pulls[n].append(bp[n])
# same gradients
g = groups[0]
ga = variants["node runs"].vjp(g)[1](direction); gb = variants["column shares"].vjp(g)[1](direction)
diff = max(float(np.abs(ga[k] - gb[k]).max() / max(1e-30, np.abs(ga[k]).max())) for k in ga)
for n in variants:
    print(json.dumps({"variant": n, "H": H, "x": X, "batch": B, "repeats": repeats, "groups": len(groups),
                      "step_ms": round(np.mean(steps[n]) * 1e3, 3), "pullback_ms": round(np.mean(pulls[n]) * 1e3, 3),
                      "max_rel_grad_diff": diff}), flush=True)
