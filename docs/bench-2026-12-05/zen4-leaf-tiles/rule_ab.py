"""Old column-tile rule (cores ignored) vs new (balanced over cores), in-process alternating.
usage: rule_ab.py MODEL H FEATURES|0 MCPU|native batch..."""
import os, sys, json
os.environ.setdefault("TVM_NUM_THREADS", "2")
import numpy as np
from cortex_tvm import data
from cortex_tvm.policy import derive
from cortex_tvm.bench.cases import make_model, feature_rows, structures
from cortex_tvm.target import make_target
from cortex_tvm.timing import batches_of, in_turn
from cortex_tvm.models import reference64
name, H, F, mcpu = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]) or None, sys.argv[4]
trees, vocab = data.sst_sample()
model = make_model(name, H, len(vocab), features=F)
tgt = make_target("llvm" if mcpu == "native" else {"kind": "llvm", "mcpu": mcpu})
orig = derive.column_cores
builds = {}
for rule in ("old", "new"):
    derive.column_cores = (lambda info, pc: 1) if rule == "old" else orig
    builds[rule] = model.compile(target=tgt)
derive.column_cores = orig
for B in map(int, sys.argv[5:]):
    groups = [structures(name, b) for b in batches_of(trees, B, 8)]
    feats = feature_rows(groups, F) if F else [None] * len(groups)
    kw = [({"features": f} if f is not None else {}) for f in feats]
    want = builds["old"](groups[0], **kw[0])
    assert np.abs(builds["new"](groups[0], **kw[0]) - want).max() < 1e-4
    fns = {k: (lambda i, c=c: c(groups[i], **kw[i])) for k, c in builds.items()}
    best = in_turn(fns, list(range(len(groups))), 4, 5)
    o, n = best["old"].mean(), best["new"].mean()
    print(json.dumps({"model": name, "H": model.hidden_size, "features": F, "mcpu": mcpu, "batch": B,
                      "old_ms": round(o * 1e3, 4), "new_ms": round(n * 1e3, 4), "old_over_new": round(o / n, 3)}), flush=True)
