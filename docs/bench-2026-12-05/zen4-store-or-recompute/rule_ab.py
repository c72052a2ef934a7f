"""The old forward_pays (internal nodes >= 1 per core per internal level, on average) against the new
cost (LevelPass.forward_pays), interleaved in one process, best of 9 rounds: the mean step (vjp +
pullback of ones at the roots) over 40 single SST trees (batch 1) and 20 pairs (batch 2)."""
import os
import time

os.environ.setdefault("TVM_NUM_THREADS", "2")
import numpy as np  # noqa: E402

import cortex_tvm as ct  # noqa: E402

trees, vocab = ct.data.sst_sample()
rng = np.random.default_rng(0)


def old_rule(level_pass):
    def forward_pays(lin):
        internal = int(lin.level_offsets[-1] - lin.level_offsets[1])
        return internal >= level_pass.cores * max(1, len(lin.level_offsets) - 2)
    return forward_pays


for name, H, E in (("TreeLSTM", 150, 300), ("TreeFC", 150, None), ("TreeGRU", 150, None), ("TreeLSTM", 64, 64)):
    kw = dict(embed_size=E) if E else {}
    compiled = getattr(ct.models, name)(hidden_size=H, vocab_size=len(vocab), seed=0, **kw).compile(training=True)
    level_pass = compiled.adjoint.level_pass
    rules = {"old": old_rule(level_pass), "new": level_pass.forward_pays}
    for B in (1, 2):
        batches = [[trees[i] for i in rng.permutation(len(trees))[:B]] for _ in range(40 // B)]
        best = {}
        for _ in range(9):
            for label, rule in rules.items():
                level_pass.forward_pays = rule
                start = time.perf_counter()
                for batch in batches:
                    out, vjp = compiled.vjp(batch)
                    vjp(np.ones_like(out))
                best[label] = min(best.get(label, 1e9), (time.perf_counter() - start) / len(batches))
        level_pass.forward_pays = rules["new"]
        print(f"{name} H={H} batch {B}: old rule {1e3 * best['old']:.3f} ms, new {1e3 * best['new']:.3f} ms, "
              f"old/new {best['old'] / best['new']:.3f}", flush=True)
