"""Interleaved in-process A/B of whole as_torch training steps (forward, loss at every node, backward,
Adagrad), TreeLSTM x = 300, h = 150, SST dev trees, 20 batches per round, 4 rounds, best round.

  python step_ab.py VOCAB BATCH

VOCAB sizes the embedding table (the trees use the bundled 5,374 words; 21,701 stands for a full SST
vocabulary).  Variants:
  before         : a copy of every weight per step and numpy's isfinite check (the sync before
                   this change, emulated), one Adagrad group with weight decay (the old example)
  shared         : the parameters' memory, the one-pass check; the same optimizer
  groups-dense   : DGL's groups (the embedding at lr 0.005, no decay), a dense embedding gradient
  groups-sparse  : the same groups, as_torch(sparse=True)
"""
import os
import sys
import time

os.environ.setdefault("TVM_NUM_THREADS", "2")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
import numpy as np  # noqa: E402
import torch  # noqa: E402

import cortex_tvm as ct  # noqa: E402
from cortex_tvm import weights as weights_module  # noqa: E402

torch.sparse.check_sparse_tensor_invariants.disable()
V, B = int(sys.argv[1]), int(sys.argv[2])
train, vocab = ct.data.sst_sample()
model = ct.models.TreeLSTM(hidden_size=150, vocab_size=V, embed_size=300, seed=0)
compiled = model.compile(training=True)
rng = np.random.default_rng(0)
batches = [[train[i] for i in rng.permutation(len(train))[:B]] for _ in range(20)]
labels = [torch.tensor([n.label for t in b for n in ct.data.postorder(t)]) for b in batches]


def old_sync(module):
    def sync():
        versions = module._versions()
        if versions != module._seen or module.compiled.training_weights is not module._loaded:
            fast, weights_module.all_finite = weights_module.all_finite, lambda a: bool(np.all(np.isfinite(a)))
            try:
                module.compiled.load_weights(dict(module._parameters), copy=True)
            finally:
                weights_module.all_finite = fast
            module._seen, module._loaded = versions, module.compiled.training_weights
    return sync


def make(variant):
    module = compiled.as_torch(sparse=variant == "groups-sparse")
    if variant == "before":
        module._sync = old_sync(module)
    torch.manual_seed(0)
    head = torch.nn.Linear(150, 5)
    if variant.startswith("groups"):
        rest = [p for n, p in module.named_parameters() if n != "emb"] + list(head.parameters())
        opt = torch.optim.Adagrad([{"params": rest, "weight_decay": 1e-4}, {"params": [module.emb], "lr": 0.005}],
                                  lr=0.05)
    else:
        opt = torch.optim.Adagrad([*module.parameters(), *head.parameters()], lr=0.05, weight_decay=1e-4)
    return module, head, opt


variants = ["before", "shared", "groups-dense", "groups-sparse"]
setups = {v: make(v) for v in variants}
rounds = {v: [] for v in variants}
for _ in range(4):
    for v in variants:
        module, head, opt = setups[v]
        module._sync()
        start = time.perf_counter()
        for batch, label in zip(batches, labels):
            opt.zero_grad()
            states = torch.cat(module(batch, all_nodes=True))
            torch.nn.functional.cross_entropy(head(states), label).backward()
            opt.step()
        rounds[v].append(1e3 * (time.perf_counter() - start) / len(batches))
print(f"TreeLSTM x=300 h=150, vocabulary {V}, batch {B}, torch {torch.__version__}, "
      f"{torch.get_num_threads()} torch threads, TVM_NUM_THREADS={os.environ['TVM_NUM_THREADS']}")
for v in variants:
    print(f"  {v:14s} best {min(rounds[v]):6.2f} ms/step  rounds " + " ".join(f"{r:.2f}" for r in rounds[v]))
print(f"  before / groups-sparse: {min(rounds['before']) / min(rounds['groups-sparse']):.2f}x; "
      f"groups-dense / groups-sparse: {min(rounds['groups-dense']) / min(rounds['groups-sparse']):.2f}x; "
      f"before / shared: {min(rounds['before']) / min(rounds['shared']):.2f}x")
