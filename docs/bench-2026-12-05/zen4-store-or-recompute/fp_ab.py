"""Whether LevelPass.forward_pays picks the faster forward: each (model, batch) timed with the
backward's own forward (store) and with the kernel + recomputation, interleaved, best of rounds."""
import os, sys, time
os.environ.setdefault("TVM_NUM_THREADS", "2")
import numpy as np, cortex_tvm as ct
trees, vocab = ct.data.sst_sample()
rng = np.random.default_rng(0)
cases = [("TreeLSTM", 150, 300), ("TreeLSTM", 64, 64), ("TreeLSTM", 300, 300), ("TreeFC", 150, 150), ("TreeGRU", 150, 150)]
if len(sys.argv) > 1:
    cases = [c for c in cases if c[0] + str(c[1]) in sys.argv[1:]]
for name, H, E in cases:
    kw = dict(embed_size=E) if name == "TreeLSTM" else {}
    model = getattr(ct.models, name)(hidden_size=H, vocab_size=len(vocab), seed=0, **kw)
    c = model.compile(training=True)
    lp = c.adjoint.level_pass
    rule = lp.forward_pays
    for B in [int(b) for b in os.environ.get('BATCHES', '1 2 3 5 10 25').split()]:
        batches = [[trees[i] for i in rng.permutation(len(trees))[:B]] for _ in range(max(4, 40 // B))]
        lins = [c.adjoint.layout(c.adjoint.linearize(b)) for b in batches]
        picks = [rule(l) for l in lins]
        best = {}
        for rnd in range(5):
            for forced in (True, False, None):
                lp.forward_pays = rule if forced is None else (lambda lin, f=forced: f)
                t0 = time.perf_counter()
                for b in batches:
                    out, vjp = c.vjp(b)
                    vjp(np.ones_like(out))
                t = (time.perf_counter() - t0) / len(batches)
                best[forced] = min(best.get(forced, 1e9), t)
        lp.forward_pays = rule
        print(f"{name} H={H} B={B}: store {1e3*best[True]:.3f} ms, kernel+recompute {1e3*best[False]:.3f} ms, "
              f"rule {1e3*best[None]:.3f} ms, kernel/store {best[False]/best[True]:.2f}, rule/store {best[None]/best[True]:.2f}; rule picks store for {sum(picks)}/{len(picks)} batches", flush=True)
