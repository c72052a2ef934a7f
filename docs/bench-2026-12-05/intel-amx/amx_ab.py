"""In-process interleaved A/B: TreeLSTM fp32 default, bf16 default (vdpbf16ps), bf16 AMX (node_tile=1)."""
import os, sys, time, json, numpy as np
os.environ.setdefault("TVM_NUM_THREADS", "2")
import cortex_tvm as ct
from cortex_tvm.policy.derive import derive
from cortex_tvm.target import cpu_info, host_llvm, make_target
H = int(sys.argv[1]); batches = [int(b) for b in sys.argv[2].split(",")]
variants = sys.argv[3].split(",") if len(sys.argv) > 3 else ["fp32", "bf16", "amx"]
info = cpu_info(make_target("llvm"))
trees, vocab = ct.data.sst_sample()
model = ct.models.TreeLSTM(hidden_size=H, vocab_size=len(vocab), seed=0)
def amx_sched(nt, mcv):
    def sched(rs):
        derive(rs, info, node_tile=nt, max_column_vectors=mcv)
        rs.dot_bf16(); rs.amx_bf16(); rs.store_bf16()
        return rs
    return sched
built = {}
for v in variants:
    if v == "fp32": built[v] = model.compile()
    elif v == "bf16":   # vdpbf16ps: this CPU without AMX (precision="bf16" now takes AMX where it can)
        no_amx = {**host_llvm(), "mattr": host_llvm().get("mattr", []) + ["-amx-bf16", "-amx-int8", "-amx-tile"]}
        built[v] = model.compile(target=no_amx, precision="bf16")
    elif v.startswith("amx"):
        mcv = int(v[3:] or 1)
        built[v] = model.compile(schedule=amx_sched(1, mcv))
res = {}
for b in batches:
    starts = list(range(0, len(trees) - b, max(1, (len(trees) - b) // 8)))[:8]
    lins = {v: [c.linearize(trees[s:s + b]) for s in starts] for v, c in built.items()}
    for v, c in built.items():
        for lin in lins[v]: c.run(lin, check=False)
    best = {v: [] for v in built}
    for rnd in range(5):
        for v, c in built.items():
            t0 = time.perf_counter()
            for _ in range(3):
                for lin in lins[v]: c.run(lin, check=False)
            best[v].append((time.perf_counter() - t0) / (3 * len(lins[v])) * 1e3)
    res[b] = {v: min(x) for v, x in best.items()}
    base = res[b].get("fp32")
    print(f"H={H} batch {b}: " + "  ".join(f"{v} {t:.3f} ms" + (f" ({base / t:.2f}x fp32)" if base else "") for v, t in res[b].items()), flush=True)
