"""One benchmark measurement in a process of its own; prints one JSON line on stdout.

    python -m cortex_tvm.bench.worker cortex_tvm DATA.npz --roots ROOTS.npy --repeats 10 --threads 2
    python -m cortex_tvm.bench.worker numpy DATA.npz --roots ROOTS.npy --repeats 10 --threads 2
    python -m cortex_tvm.bench.worker sgemm --repeats 10 --threads 2
    python -m cortex_tvm.bench.worker cortex_tvm DATA.npz --roots ROOTS.npy --train --grads GRADS.npy ...

DATA.npz is written by the orchestrator (`cortex_tvm.bench.run`): the model's
weights and the SST tree indices of every batch.  The worker writes the roots
of every batch, (batches, B, *state), to ROOTS.npy for the orchestrator to
check (`check.py`).  The thread variables must be set by the parent (they are
read when the runtimes start); the worker only checks them.

--train (cortex_tvm only): one training step per batch is timed instead (`run_train`): with the
npz's optimizer, compile(training=True).as_torch(), loss = sum(roots * R) (R: the npz's d_roots),
loss.backward() and the optimizer's step; without, ``out, vjp = compiled.vjp(trees); vjp(R)``.
The worker also writes the gradient of the npz's grad_weight for every batch, (batches, *shape),
to GRADS.npy.
"""
from __future__ import annotations

import argparse
import functools
import json
import os
import sys
import time

import numpy as np

from .. import data
from ..node_features import FeaturedBatch, with_features
from ..timing import best_of
from .cases import make_model, structures
from .common import THREAD_VARS, per_batch_best
from .peak import fma_peak
from .torch_worker import make_optimizer, read_optimizer, train_steps


def load_case(path):
    """(model, batches of structures, the npz's arrays) from an orchestrator npz.  With
    `features` in the npz each batch is a FeaturedBatch carrying its rows."""
    case = np.load(path)
    trees, vocab = data.sst_sample()
    name = str(case["model"])
    width = int(case["features"].shape[1]) if "features" in case.files else None
    embed = int(case["embed"]) if "embed" in case.files else None
    model = make_model(name, int(case["hidden"]), len(vocab), width, embed)
    model.load_weights({k[2:]: case[k] for k in case.files
                        if k.startswith("w_") and k[2:] in model.weight_shapes()})
    index = case["tree_index"]
    size = int(case["batch"])
    chosen = structures(name, [trees[i] for i in index])
    batches = [chosen[k:k + size] for k in range(0, len(chosen), size)]
    if width is not None:
        offsets, rows = case["feature_offsets"], case["features"]
        batches = [FeaturedBatch(b, np.ascontiguousarray(rows[offsets[k]:offsets[k + 1]]))
                   for k, b in enumerate(batches)]
    return model, batches, case


def run_model(system, path, repeats, roots_path, mcpu=None):
    model, batches, _ = load_case(path)
    extra = {}
    if system.startswith("cortex_tvm"):
        start = time.perf_counter()
        fn = model.compile(target={"kind": "llvm", "mcpu": mcpu} if mcpu else "llvm",
                           precision="bf16" if system.endswith("-bf16") else "fp32")
        extra["compile_s"] = round(time.perf_counter() - start, 3)
        extra["recipe"] = getattr(fn, "recipe_name", None)
        extra["target"] = str(fn.target)
        extra["runtime_flops"] = float(np.mean([model.runtime_flops(b, bool(fn.plan.hoisted)) for b in batches]))
    else:
        fn = model.reference
    roots = []
    times = per_batch_best(with_features(fn), batches, repeats, outputs=roots)
    np.save(roots_path, np.stack(roots))
    if system.startswith("cortex_tvm"):        # the host-side share, for the record
        lin = per_batch_best(with_features(fn.linearize), batches, repeats)
        extra["linearize_ms"] = float(np.mean(lin)) * 1e3
    return {"ms": float(np.mean(times)) * 1e3, "per_batch_ms": [t * 1e3 for t in times], **extra}


def run_train(system, path, repeats, roots_path, grads_path, mcpu=None):
    """One training step per batch.  With the case's optimizer (`torch_worker.make_optimizer`) the
    step is a user's with torch: ``compiled.as_torch()`` on the batch, ``loss.backward()``, the
    optimizer's step (the next forward hands the moved weights to the kernel); without, the
    compiled model's own ``out, vjp = compiled.vjp(trees); vjp(R)``.  Also the pullback alone."""
    if system not in ("cortex_tvm", "cortex_tvm-bf16"):
        raise ValueError(f"--train: no training step for {system!r} in this worker")
    model, batches, case = load_case(path)
    direction = np.array(case["d_roots"], np.float32)
    weight = str(case["grad_weight"])
    spec = read_optimizer(case)
    start = time.perf_counter()
    compiled = model.compile(target={"kind": "llvm", "mcpu": mcpu} if mcpu else "llvm", training=True,
                             precision="bf16" if system.endswith("-bf16") else "fp32")
    extra = {"compile_s": round(time.perf_counter() - start, 3), "recipe": getattr(compiled, "recipe_name", None),
             "target": str(compiled.target), "optimizer": spec and spec["kind"]}
    if spec is None:
        roots, grads, times = _vjp_steps(compiled, model, batches, direction, weight, repeats)
    else:
        roots, grads, times, extra["weight_moved"] = _torch_steps(compiled, batches, direction, weight,
                                                                  repeats, spec)
        extra["omp_wait_policy"] = os.environ.get("OMP_WAIT_POLICY")

    def backward_alone(trees):
        """the pullback, again and again on one forward's kept values"""
        return best_of(compiled.vjp(trees)[1], direction, repeats)
    backward = [backward_alone(batch) for batch in batches]
    np.save(roots_path, roots)
    np.save(grads_path, grads)
    return {"ms": float(np.mean(times)) * 1e3, "per_batch_ms": [t * 1e3 for t in times], "mode": "train",
            "backward_ms": float(np.mean(backward)) * 1e3, "grad_weight": weight, **extra}


def _vjp_steps(compiled, model, batches, direction, weight, repeats):
    """(roots, gradients of `weight`, per-batch best times) of ``vjp(trees)`` and its pullback."""
    def step(trees):
        out, vjp = compiled.vjp(trees)
        return out, vjp(direction)

    roots, grads = [], []
    for batch in batches:                 # the warm-up: every batch once, its results checked
        out, g = step(batch)
        if sorted(g) != sorted(model.weights):
            raise RuntimeError(f"vjp gave gradients of {sorted(g)}, not of every weight {sorted(model.weights)}")
        roots.append(np.array(out, copy=True))
        grads.append(np.array(g[weight], copy=True))
    return np.stack(roots), np.stack(grads), [best_of(step, batch, repeats) for batch in batches]


def _torch_steps(compiled, batches, direction, weight, repeats, spec):
    """`torch_worker.train_steps` through ``compiled.as_torch(sparse=spec's sparse)``: the same
    steps and optimizer as the PyTorch baselines'.  The orchestrator sets OMP_WAIT_POLICY=PASSIVE,
    as docs/training.md tells a user (torch's spinning threads would take the kernel's cores); it
    must be set before this process imported tvm, whose ffi imports torch."""
    import torch

    torch.set_num_threads(int(os.environ["TVM_NUM_THREADS"]))
    module = compiled.as_torch(sparse=bool(spec.get("sparse")))
    parameters = dict(module.named_parameters())
    d_out = torch.from_numpy(direction)

    def step(trees):
        out = module(trees)
        (out * d_out).sum().backward()
        return out
    from ..optim import Adagrad
    ours = functools.partial(Adagrad, target=compiled.target)      # the model's ISA (--mcpu), not this CPU's
    return train_steps(step, parameters, batches, weight, repeats, make_optimizer(parameters, spec, ours))


def run_sgemm(repeats, n=1024):
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    c = np.empty((n, n), np.float32)

    def mm(_):
        np.matmul(a, b, out=c)

    best = min(per_batch_best(mm, [None] * 3, max(repeats, 5)))
    # the CPU's own FMA rate beside it: OpenBLAS's sgemm is well below it on some CPUs (Zen 5)
    out = {"ms": best * 1e3, "gflops": 2.0 * n ** 3 / best / 1e9, "n": n}
    try:
        out["peak_gflops"] = fma_peak(repeats=max(repeats, 5))["gflops"]
    except Exception as err:      # noqa: BLE001 - the sgemm figure stands without it; the row says why
        out["peak_error"] = f"{type(err).__name__}: {err}"
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cortex_tvm.bench.worker")
    parser.add_argument("system", choices=["cortex_tvm", "cortex_tvm-bf16", "numpy", "sgemm"])
    parser.add_argument("data", nargs="?", help="the orchestrator's .npz (not for sgemm)")
    parser.add_argument("--roots", help="where to write every batch's roots, .npy (not for sgemm)")
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--threads", type=int, required=True)
    parser.add_argument("--mcpu", default=None, help="cortex_tvm: the LLVM CPU to compile for")
    parser.add_argument("--train", action="store_true",
                        help="cortex_tvm: time a training step (forward, backward, the npz's optimizer) per batch")
    parser.add_argument("--grads", help="--train: where to write every batch's gradient of the npz's grad_weight")
    args = parser.parse_args(argv)
    wrong = {v: os.environ.get(v) for v in THREAD_VARS if os.environ.get(v) != str(args.threads)}
    if wrong:
        print(f"worker: thread variables not set to {args.threads} by the parent: {wrong}", file=sys.stderr)
        return 2
    if args.system == "sgemm":
        result = run_sgemm(args.repeats)
    else:
        if not args.data or not args.roots:
            parser.error(f"{args.system} needs the data .npz and --roots")
        if args.train:
            if not args.grads:
                parser.error("--train needs --grads")
            result = run_train(args.system, args.data, args.repeats, args.roots, args.grads, args.mcpu)
        else:
            result = run_model(args.system, args.data, args.repeats, args.roots, args.mcpu)
    result.update(system=args.system, threads=args.threads, numpy=np.__version__)
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
