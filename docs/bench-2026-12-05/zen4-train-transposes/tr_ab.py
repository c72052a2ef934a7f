"""The weights' transposes in the training pass: numpy on the host (before) against the pass's own
parallel nest (now), interleaved in one process.  usage: tr_ab.py H X B [repeats] [groups]"""
import json, os, sys, time
os.environ.setdefault("TVM_NUM_THREADS", "2")
import numpy as np
import cortex_tvm as ct
from cortex_tvm import adjoint_kernel, data
from cortex_tvm.bench.case_data import case_groups, train_direction
H, X, B = (int(a) for a in sys.argv[1:4])
repeats = int(sys.argv[4]) if len(sys.argv) > 4 else 10
ngroups = int(sys.argv[5]) if len(sys.argv) > 5 else 10
MODEL = os.environ.get("MODEL", "treelstm")
trees, vocab = data.sst_sample()
def make():
    return (ct.models.TreeLSTM(hidden_size=H, vocab_size=len(vocab), embed_size=X) if MODEL == "treelstm"
            else ct.models.BY_NAME[MODEL](hidden_size=H, vocab_size=len(vocab)))
model = make()
_, groups = case_groups(MODEL, trees, B, ngroups)
direction = train_direction(B, model.hidden_size)
original = adjoint_kernel._emit_transpose
variants = {}
for name in ("host", "kernel"):
    adjoint_kernel._emit_transpose = original if name == "kernel" else (lambda *a, **k: None)
    c = model.compile(training=True, target=json.loads(os.environ.get("TARGET", "\"llvm\"")))
    lp = c.adjoint.level_pass
    for part in ("forward", "backward", "all"):
        lp.function(part, True)
    if name == "host":            # what the host did before: numpy's copy of each weight's transpose
        positions = [(i, p[1].name) for i, p in enumerate(lp.params) if p[0] == "transposed"]
        fn_of = lp.function
        def function(part, parallel, fn_of=fn_of, positions=positions, c=c):
            fn = fn_of(part, parallel)
            if part == "backward":
                return fn
            def run(*args):
                for i, w in positions:
                    np.copyto(args[i], np.asarray(c.training_weights[w], np.float32).T)
                fn(*args)
            return run
        lp.function = function
    variants[name] = c
adjoint_kernel._emit_transpose = original
def timed(fn):
    t = time.perf_counter(); fn(); return time.perf_counter() - t
steps = {n: [] for n in variants}
for g in groups:
    best = dict.fromkeys(variants, float("inf"))
    for _ in range(repeats):
        for name, c in variants.items():
            best[name] = min(best[name], timed(lambda: c.vjp(g)[1](direction)))
    for n in variants:
        steps[n].append(best[n])
ga = variants["host"].vjp(groups[0])[1](direction); gb = variants["kernel"].vjp(groups[0])[1](direction)
diff = max(float(np.abs(ga[k] - gb[k]).max()) for k in ga)
h, k = np.mean(steps["host"]), np.mean(steps["kernel"])
print(json.dumps({"model": MODEL, "H": H, "x": X, "batch": B, "target": os.environ.get("TARGET", "llvm"),
                  "host_step_ms": round(h * 1e3, 3), "kernel_step_ms": round(k * 1e3, 3),
                  "host_over_kernel": round(h / k, 3), "max_grad_diff": diff}), flush=True)
