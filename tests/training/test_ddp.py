"""`as_torch()` under torch.nn.parallel.DistributedDataParallel: 2 processes, gloo, loopback.

Each rank trains on half of the trees; DDP averages the gradients.  They must equal one
process's gradients of the mean loss over all the trees, and after an optimizer step both
ranks' kernels must run on the same, stepped weights.
"""
import os
import socket
import subprocess
import sys

import numpy as np
import pytest

import cortex_tvm as ct

torch = pytest.importorskip("torch")

from . import ddp_worker as w  # noqa: E402 - needs torch

WORKER = os.path.join(os.path.dirname(__file__), "ddp_worker.py")


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_ddp_gradients_equal_one_process_on_the_union(tmp_path):
    port, outs = _free_port(), [tmp_path / f"rank{r}.npz" for r in range(2)]
    env = dict(os.environ, TVM_NUM_THREADS="1", OMP_NUM_THREADS="1")
    procs = [subprocess.Popen([sys.executable, WORKER, str(r), "2", str(port), str(outs[r])], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for r in range(2)]
    for p in procs:
        log, _ = p.communicate(timeout=300)
        assert p.returncode == 0, log[-3000:]
    ranks = [np.load(o) for o in outs]

    trees, vocab = ct.data.sst_sample()
    model = ct.models.TreeLSTM(w.H, len(vocab), seed=w.SEED)
    module = model.compile(training=True).as_torch()
    direction = torch.from_numpy(np.random.default_rng(0).standard_normal((w.TREES, w.H)).astype(np.float32))
    (module(trees[:w.TREES]) * direction).sum(1).mean().backward()
    for name, p in module.named_parameters():
        for rank in ranks:
            np.testing.assert_allclose(rank[f"grad_{name}"], p.grad.numpy(), rtol=1e-5, atol=1e-7, err_msg=name)
        assert np.abs(p.grad.numpy()).max() > 0

    torch.optim.SGD(module.parameters(), lr=0.1).step()
    with torch.no_grad():
        stepped = module(trees[:w.TREES]).numpy()
    np.testing.assert_allclose(np.concatenate([r["stepped"] for r in ranks]), stepped, rtol=1e-5, atol=1e-6)


def test_a_sparse_module_in_a_process_group_says_ddp_cannot_take_it(monkeypatch):
    """DDP takes sparse gradients only from nn.Embedding modules; with as_torch(sparse=True) it
    failed in the backward with torch's "Cannot access storage of SparseTensorImpl" alone: the
    module's first training forward in a process group says why and what to use (once)."""
    import warnings

    import torch.distributed as dist
    trees, vocab = ct.data.sst_sample()
    module = ct.models.TreeFC(hidden_size=8, vocab_size=len(vocab), seed=1).compile(
        training=True).as_torch(sparse=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")              # no warning outside a process group
        module(trees[:2]).sum().backward()
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(_free_port()))
    dist.init_process_group("gloo", rank=0, world_size=1)
    try:
        with pytest.warns(UserWarning, match=r"sparse=True\) in a torch.distributed process group.*as_torch\(\)"):
            module(trees[:2])
        with warnings.catch_warnings():
            warnings.simplefilter("error")          # said once
            ddp = torch.nn.parallel.DistributedDataParallel(module)
            with pytest.raises(RuntimeError, match="SparseTensorImpl"):
                ddp(trees[:2]).sum().backward()
    finally:
        dist.destroy_process_group()
