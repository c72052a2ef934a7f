"""One rank of the DistributedDataParallel check (test_ddp.py): gloo on the loopback.

Usage: python ddp_worker.py RANK WORLD PORT OUT.npz.  Each rank compiles the same TreeLSTM
(training=True), takes its share of the same SST trees, and writes the gradients DDP left on
the module's parameters, and the parameters after one SGD step.
"""
import os
import sys

import numpy as np
import torch
import torch.distributed as dist

import cortex_tvm as ct

H, TREES, SEED = 16, 8, 3


def main(rank, world, port, out):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    trees, vocab = ct.data.sst_sample()
    model = ct.models.TreeLSTM(H, len(vocab), seed=SEED)
    module = torch.nn.parallel.DistributedDataParallel(model.compile(training=True).as_torch())
    mine = trees[rank * TREES // world:(rank + 1) * TREES // world]
    direction = torch.from_numpy(np.random.default_rng(0).standard_normal((TREES, H)).astype(np.float32))
    share = direction[rank * TREES // world:(rank + 1) * TREES // world]
    loss = (module(mine) * share).sum(1).mean()          # DDP averages: the mean over all trees
    loss.backward()
    grads = {f"grad_{n}": p.grad.numpy().copy() for n, p in module.module.named_parameters()}
    torch.optim.SGD(module.parameters(), lr=0.1).step()
    with torch.no_grad():
        stepped = module(mine).numpy()
    np.savez(out, **grads, stepped=stepped)
    dist.destroy_process_group()


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
