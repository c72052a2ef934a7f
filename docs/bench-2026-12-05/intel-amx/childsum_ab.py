"""ChildSum TreeLSTM (max 8 children) H=256: fp32, bf16 as compile(precision="bf16") builds it on
this AMX CPU, and bf16 on vdpbf16ps alone (this CPU without AMX), interleaved, best of 5."""
import os, time
os.environ.setdefault("TVM_NUM_THREADS", "2")
import cortex_tvm as ct
from cortex_tvm.target import host_llvm
trees, vocab = ct.data.sst_sample()
model = ct.models.ChildSumTreeLSTM(hidden_size=256, vocab_size=len(vocab), max_children=8, seed=0)
no_amx = {**host_llvm(), "mattr": host_llvm().get("mattr", []) + ["-amx-bf16", "-amx-int8", "-amx-tile"]}
builds = {"fp32": model.compile(), "bf16 AMX": model.compile(precision="bf16"),
          "bf16 vdpbf16ps": model.compile(target=no_amx, precision="bf16")}
assert builds["bf16 AMX"].plan.amx and not builds["bf16 vdpbf16ps"].plan.amx
for b in (1, 10, 64):
    starts = list(range(0, len(trees) - b, max(1, (len(trees) - b) // 8)))[:8]
    lins = {n: [c.linearize(trees[s:s + b]) for s in starts] for n, c in builds.items()}
    best = {}
    for rnd in range(5):
        for n, c in builds.items():
            t0 = time.perf_counter()
            for _ in range(3):
                for lin in lins[n]:
                    c.run(lin, check=False)
            best[n] = min(best.get(n, 1e9), (time.perf_counter() - t0) / (3 * len(lins[n])))
    print(f"ChildSum H=256 batch {b}: " + "  ".join(f"{n} {1e3 * t:.3f} ms ({best['fp32'] / t:.2f}x fp32)"
                                                   for n, t in best.items()), flush=True)
