"""Helpers shared by the bench orchestrator and its cortex_tvm/numpy/sgemm workers.

Nothing here imports TVM, so the orchestrator can use it before any worker starts.
(`torch_worker.py` is standalone on purpose and repeats the few lines it needs.)
"""
from __future__ import annotations

import os
import platform

import numpy as np

from ..timing import best_of, in_turn

THREAD_VARS = ("TVM_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
#: `bench --train`: the weight whose gradient every worker writes and the orchestrator checks
#: (the case's .npz names it too, for the standalone torch worker)
GRAD_WEIGHT = {"treelstm": "U", "treefc": "W"}
#: `bench --train`: the seed of the fixed loss direction R (loss = sum(roots * R))
TRAIN_SEED = 20
#: `bench --train`: useful FLOPs of a training step, in forward FLOPs (each product y = W x also
#: gives dW = dy x^T and dx = W^T dy in the backward; the elementwise work is a few % of either)
TRAIN_FLOPS_FACTOR = 3
#: `bench --train`'s optimizer step, every system's the same torch.optim.Adagrad: DGL's TreeLSTM
#: recipe (lr 0.05 and weight decay 1e-4, the embedding tables at 0.1 x the rate without decay),
#: written into the case's .npz as JSON for the standalone torch worker; sparse: the embedding's
#: gradient a sparse tensor of the batch's rows on every side (`--optimizer adagrad-sparse`);
#: ours: cortex_tvm steps with its own `cortex_tvm.optim.Adagrad`, the same update (`--optimizer adagrad-ours`)
TRAIN_OPTIMIZER = {"kind": "adagrad", "lr": 0.05, "weight_decay": 1e-4, "tables": ["emb"], "table_lr": 0.005,
                   "sparse": False, "ours": False}


def train_optimizer(args):
    """`--train`'s optimizer spec (`common.TRAIN_OPTIMIZER`; adagrad-sparse: with sparse embedding
    gradients; -ours: our side steps with cortex_tvm.optim.Adagrad), or None (--optimizer none)."""
    choice = getattr(args, "optimizer", "adagrad")
    return None if choice == "none" else {**TRAIN_OPTIMIZER, "sparse": "sparse" in choice, "ours": "ours" in choice}


def train_step_parts(args) -> str:
    """What a timed training step holds, for the tables' titles."""
    spec = train_optimizer(args)
    if spec is None:
        return "forward + backward"
    return f"forward + backward + {spec['kind'].capitalize()} step" + (
        ", sparse embedding gradients" if spec["sparse"] else "") + (
        " (ours: cortex_tvm.optim.Adagrad)" if spec["ours"] else "")


def thread_env(threads: int, base=None) -> dict:
    """Environment for a worker: every runtime's thread pool sized to `threads`."""
    env = dict(os.environ if base is None else base)
    for name in THREAD_VARS:
        env[name] = str(threads)
    return env


def batch_starts(num_trees: int, size: int, count: int) -> list:
    """Start indices of `count` batches of `size` consecutive trees, spread evenly over the file."""
    if size < 1 or count < 1:
        raise ValueError(f"batch size and count must be >= 1, got {size} and {count}")
    if size > num_trees:
        raise ValueError(f"batch size {size} is larger than the {num_trees} trees available")
    last = num_trees - size
    step = last // (count - 1) if count > 1 else 0
    return [k * step for k in range(count)]


def per_batch_best(fn, batches, repeats: int, outputs=None) -> list:
    """Warm up on every batch once, then each batch's best time over `repeats` (seconds).

    `outputs`, a list, receives a copy of each batch's warm-up result (for the correctness
    check; a copy, as a runtime may hand back the same buffer every call).
    """
    for batch in batches:
        out = fn(batch)
        if outputs is not None:
            outputs.append(np.array(out, copy=True))
    return [best_of(fn, batch, repeats) for batch in batches]


def alternate(builds: dict, batches, rounds: int, repeats: int) -> dict:
    """label -> seconds for each of `builds` (label -> callable): the mean over `batches` of
    each batch's best time over `rounds` rounds taken in turn (`timing.in_turn`)."""
    return {label: float(np.mean(times)) for label, times in in_turn(builds, batches, rounds, repeats).items()}


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()
