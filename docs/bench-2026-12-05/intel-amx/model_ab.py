"""The LLVM CPU model fp32 code is built for, on a CPU that reports model 167: LLVM's guess
(rocketlake: one FMA unit in cortex_tvm's table, so 3-node tiles) against the model its
extensions match (sapphirerapids: two units, larger tiles), TreeLSTM and TreeFC, SST batches,
interleaved in one process, best of 5 rounds."""
import os, sys, time
os.environ.setdefault("TVM_NUM_THREADS", "2")
import cortex_tvm as ct
trees, vocab = ct.data.sst_sample()
H = int(sys.argv[1]) if len(sys.argv) > 1 else 256
for name in ("TreeLSTM", "TreeFC"):
    model = getattr(ct.models, name)(hidden_size=H, vocab_size=len(vocab), seed=0)
    builds = {m: model.compile(target={"kind": "llvm", "mcpu": m}) for m in ("rocketlake", "sapphirerapids")}
    for b in (1, 10, 64):
        starts = list(range(0, len(trees) - b, max(1, (len(trees) - b) // 8)))[:8]
        lins = {m: [c.linearize(trees[s:s + b]) for s in starts] for m, c in builds.items()}
        best = {}
        for rnd in range(5):
            for m, c in builds.items():
                t0 = time.perf_counter()
                for _ in range(3):
                    for lin in lins[m]:
                        c.run(lin, check=False)
                best[m] = min(best.get(m, 1e9), (time.perf_counter() - t0) / (3 * len(lins[m])))
        r, s = best["rocketlake"], best["sapphirerapids"]
        print(f"{name} H={H} batch {b}: rocketlake {1e3 * r:.3f} ms, sapphirerapids {1e3 * s:.3f} ms ({r / s:.2f}x)",
              flush=True)
