"""What the training-step probes of 2026-12-07's late morning share (host/memory_ab.py, host/step_parts.py,
inner-words/step_ab.py): a zoo model at h = `hidden`, x = `embed`, compiled with training=True, as
`as_torch(sparse=True)` under `ct.optim.Adagrad` in DGL's two groups, a fixed adjoint R on the roots, and 10 batches
of `batch` SST trees (seeded).  The probes import it with this folder on sys.path, after their own
TVM_NUM_THREADS / OMP_WAIT_POLICY defaults (2 threads, PASSIVE: before torch loads).  The runs recorded beside them
were taken with this setup written out in each probe, whose loop held a step's output until the next step's forward
had run; `step` lets it go at once."""
from types import SimpleNamespace

import numpy as np
import torch

import cortex_tvm as ct


def training_step(name="treelstm", batch=25, hidden=150, embed=300, precision="fp32", package=ct) -> SimpleNamespace:
    """compiled, module, opt, R, batches, trees, and step(i): zero_grad, the forward on batch i % 10, (out * R).sum()
    backward, opt.step().  package: the cortex_tvm to build it with (another version of it: host-redesign/twin_ab.py)."""
    ct = package
    torch.set_num_threads(2)
    trees, vocab = ct.data.sst_sample()
    model = ct.models.BY_NAME[name](hidden_size=hidden, vocab_size=len(vocab), seed=0, embed_size=embed)
    compiled = model.compile(training=True, precision=precision)
    module = compiled.as_torch(sparse=True)
    params = dict(module.named_parameters())
    rest = [v for k, v in params.items() if k != "emb"]
    opt = ct.optim.Adagrad([{"params": rest, "lr": 0.05, "weight_decay": 1e-4},
                            {"params": [params["emb"]], "lr": 0.005}], target=compiled.target)
    R = torch.from_numpy(np.random.default_rng(1).standard_normal((batch, hidden)).astype(np.float32))
    rng = np.random.default_rng(0)
    batches = [[trees[i] for i in rng.permutation(len(trees))[:batch]] for _ in range(10)]

    def step(i):
        opt.zero_grad()
        (module(batches[i % 10]) * R).sum().backward()
        opt.step()
    return SimpleNamespace(compiled=compiled, module=module, opt=opt, R=R, batches=batches, trees=trees, step=step)
