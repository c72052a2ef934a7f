"""The example's own step (examples/train_sst.py: DGL's Adagrad groups), as_torch(sparse=True) against
--dense-embedding, interleaved in one process: 880 bundled SST dev trees, batch 25, 3 rounds, ms per step."""
import os, sys, time
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "examples"))
import train_sst as ex
import numpy as np, torch, cortex_tvm as ct
train, vocab = ct.data.sst_sample(); train = train[:880]
rng = np.random.default_rng(0)
order = rng.permutation(len(train))
batches = [[train[i] for i in order[k:k + 25]] for k in range(0, len(train), 25)]
setups = {}
for sparse in (True, False):
    _, enc = ex.make_encoder(len(vocab), 150, 300, 0, sparse)
    clf = torch.nn.Linear(150, 5)
    setups[sparse] = (enc, clf, ex.make_optimizer(enc, clf, 0.05, 1e-4))
T = {True: [], False: []}
for rnd in range(3):
    for sparse, (enc, clf, opt) in setups.items():
        t = time.perf_counter()
        for b in batches:
            ex.step(enc, clf, opt, b)
        T[sparse].append(1e3 * (time.perf_counter() - t) / len(batches))
print({("sparse" if k else "dense"): [round(x, 2) for x in v] for k, v in T.items()})
