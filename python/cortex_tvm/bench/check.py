"""Every batch of every system against the float64 reference (`models.reference64`).

The orchestrator computes the reference roots of every batch once, one node at
a time in float64 from the model's weights; each worker writes the roots it
computed for every batch (float32, from its warm-up pass over the batches) and
the orchestrator checks them here.  No system is its own reference: numpy's
level-batched executor is checked like the rest.

Tolerance: batch k passes when max |out_k - ref_k| <= TOLERANCE * max(1, max |ref_k|).
The roots are float32 results of a few dozen levels (SST trees are at most 28
high) of length-2H dot products and sigmoid/tanh, which damp earlier errors; the observed errors are ~1e-7 to 1e-6
(the compiled kernels' polynomial exp/sigmoid/tanh add ~3e-7), while a wrong
gate, child or weight moves a root by 1e-2 or more.  1e-3 sits between the two
with two orders of margin each way.  Most roots are tanh/sigmoid-bounded (|h| <= 1,
so the bound is 1e-3 absolute); a one-leaf TreeFC tree's root is an N(0, 1)
embedding, hence the scaling by the batch's largest |ref| above 1.
"""
from __future__ import annotations

import math

import numpy as np

from ..recipes import ROOT_TOLERANCE

#: the tolerance's scale: float32 roots vs float64 ones (see the module doc)
TOLERANCE = ROOT_TOLERANCE["fp32"]
#: systems with bfloat16 weights (8 significant bits: each weight off by up to 2**-8 of itself)
#: against the float64 reference of the float32 weights
BF16_TOLERANCE = ROOT_TOLERANCE["bf16"]


def tolerance_of(system: str) -> float:
    return BF16_TOLERANCE if system.endswith("-bf16") else TOLERANCE


def batch_tolerance(ref_batch, tolerance: float = TOLERANCE) -> float:
    """The largest max |error| batch `ref_batch` accepts (see the module doc)."""
    return tolerance * max(1.0, float(np.max(np.abs(ref_batch))))


def check_roots(out, ref, tolerance: float = TOLERANCE) -> dict:
    """Each batch's max |out - ref| against its tolerance.

    out: a worker's roots, (batches, B, *state) (None when it wrote none); ref: the float64
    reference of the same shape.  A missing, misshapen or non-finite result is an infinite error.
    Returns {"batch_abs_err": [...], "batch_tol": [...], "wrong_batches": [batch indices],
    "max_abs_err": float}, plain values for the JSON record.
    """
    tol = [batch_tolerance(r, tolerance) for r in ref]
    if out is None or np.shape(out) != np.shape(ref):
        err = [math.inf] * len(ref)
    else:
        diff = np.abs(np.asarray(out, np.float64) - ref).reshape(len(ref), -1)
        # NaN compares false everywhere: any non-finite value counts as an infinite error
        err = [float(d.max()) if np.all(np.isfinite(d)) else math.inf for d in diff]
    return {"batch_abs_err": err, "batch_tol": tol,
            "wrong_batches": [k for k, (e, t) in enumerate(zip(err, tol)) if not e <= t],
            "max_abs_err": max(err, default=0.0)}


def wrong_lines(system, where, checked, round_index=None) -> list:
    """One line per wrong batch: model/size, system, batch index, error and tolerance."""
    rnd = "" if round_index is None else f" (round {round_index + 1})"
    return [f"{system} {where} batch {k}{rnd}: max|err| {checked['batch_abs_err'][k]:.3g} "
            f"> tolerance {checked['batch_tol'][k]:.3g}" for k in checked["wrong_batches"]]


# -- training steps (`cortex-tvm bench --train`) --------------------------------------------------
#
# Each worker also writes, for every batch, the gradient of one weight (common.GRAD_WEIGHT: U of
# TreeLSTM, W of TreeFC) of loss = sum(roots * R), R the case's fixed d_roots.  The reference is
# PyTorch autograd in float64 through an eager per-node recursion over the `data.Node` trees
# (`torch_grads64`, written here, not shared with any worker), its roots checked against
# `models.reference64` first; without torch in the orchestrator's Python, central differences of
# `reference64` at a few sampled entries (`difference_grads64`).
#
# Tolerance: batch k passes when max |g_k - ref_k| <= GRAD_TOLERANCE * max|ref_k| (the max over
# the sampled entries for central differences).  A float32 gradient is a sum over every node of
# products of float32 states and gates; observed errors are ~1e-6 of max|grad|, while a wrong
# term (a missing child, gate or transpose) moves it by 1e-2 or more of that.

#: a gradient's tolerance, relative to the largest |reference gradient| of its batch
GRAD_TOLERANCE = 1e-3
#: the same for a training step whose products take bfloat16 inputs (8 significant bits): ~3e-3
#: of max|grad| observed (TreeLSTM, SST), a wrong term still 1e-2 or more
BF16_GRAD_TOLERANCE = 3e-2
#: the scale's floor: a batch whose reference gradient is (near) zero, e.g. only one-leaf trees
GRAD_FLOOR = 1e-3


def grad_tolerance_of(system: str) -> float:
    return BF16_GRAD_TOLERANCE if system.endswith("-bf16") else GRAD_TOLERANCE


def check_grads(out, grad_ref, tolerance: float = GRAD_TOLERANCE) -> dict:
    """Each batch's gradient against the reference (`reference_grads`'s dict).

    out: a worker's gradients, (batches, *weight shape) (None when it wrote none).  With a
    sampled reference (grad_ref["index"] not None) only those entries are compared.  A missing,
    misshapen or non-finite gradient is an infinite error.  Returns {"grad_batch_abs_err",
    "grad_batch_tol", "grad_batch_rel_err" (error / max|ref_k|), "grad_wrong_batches",
    "grad_max_abs_err", "grad_max_rel_err", "grad_weight"}, plain values for the JSON record.
    """
    ref, index = np.asarray(grad_ref["ref"], np.float64), grad_ref.get("index")
    scale = [max(GRAD_FLOOR, float(np.max(np.abs(r)))) for r in ref]
    tol = [tolerance * s for s in scale]
    full = (len(ref),) + tuple(grad_ref["shape"])
    if out is None or np.shape(out) != full:
        err = [math.inf] * len(ref)
    else:
        got = np.asarray(out, np.float64)
        if index is not None:
            got = got[(slice(None),) + tuple(np.asarray(index).T)]
        diff = np.abs(got - ref).reshape(len(ref), -1)
        err = [float(d.max()) if np.all(np.isfinite(d)) else math.inf for d in diff]
    rel = [e / s for e, s in zip(err, scale)]
    return {"grad_weight": grad_ref["weight"], "grad_batch_abs_err": err, "grad_batch_tol": tol,
            "grad_batch_rel_err": rel,
            "grad_wrong_batches": [k for k, (e, t) in enumerate(zip(err, tol)) if not e <= t],
            "grad_max_abs_err": max(err, default=0.0), "grad_max_rel_err": max(rel, default=0.0)}


def grad_wrong_lines(system, where, checked, round_index=None) -> list:
    """One line per batch whose gradient is wrong: model/size, system, weight, batch, error, tolerance."""
    rnd = "" if round_index is None else f" (round {round_index + 1})"
    name = checked.get("grad_weight", "weight")
    return [f"{system} {where} batch {k}{rnd}: gradient of {name} max|err| {checked['grad_batch_abs_err'][k]:.3g} "
            f"> tolerance {checked['grad_batch_tol'][k]:.3g}" for k in checked.get("grad_wrong_batches", ())]


def torch_grads64(name: str, weights: dict, groups: list, d_roots, weight: str):
    """PyTorch autograd in float64, one node at a time over `data.Node` binary trees.

    Returns (roots (batches, B, H), gradient of `weight` of sum(roots * d_roots) per batch,
    (batches, *shape)), both float64.  The per-node equations are the models' (TreeLSTM: leaves
    i, o, u = W x + bW; inner i, fl, fr, o, u = U [hl; hr] + bU; TreeFC: leaves x, inner
    tanh(W (hl + hr) + b)); the caller checks the roots against `models.reference64`."""
    import torch

    w = {k: torch.from_numpy(np.array(v, np.float64)) for k, v in weights.items()}
    target = w[weight].requires_grad_()
    direction = torch.from_numpy(np.array(d_roots, np.float64))
    sig, tanh = torch.sigmoid, torch.tanh

    def kids(n):
        if len(n.children) != 2:
            raise ValueError(f"torch_grads64: {n!r} has {len(n.children)} children (binary trees only)")
        return n.children

    if name == "treelstm":
        def node(n):
            if n.children is None:
                i, o, u = (w["W"] @ w["emb"][n.word] + w["bW"]).chunk(3)
                c = sig(i) * tanh(u)
                return sig(o) * tanh(c), c
            (hl, cl), (hr, cr) = (node(k) for k in kids(n))
            i, fl, fr, o, u = (w["U"] @ torch.cat((hl, hr)) + w["bU"]).chunk(5)
            c = sig(i) * tanh(u) + sig(fl) * cl + sig(fr) * cr
            return sig(o) * tanh(c), c

        def root(t):
            return node(t)[0]
    elif name == "treefc":
        def root(n):
            if n.children is None:
                return w["emb"][n.word]
            left, right = kids(n)
            return tanh(w["W"] @ (root(left) + root(right)) + w["b"])
    else:
        raise ValueError(f"torch_grads64: no float64 PyTorch reference for {name!r}")
    roots, grads = [], []
    with torch.enable_grad():
        for group in groups:
            target.grad = None
            out = torch.stack([root(t) for t in group])
            (out * direction).sum().backward()
            roots.append(out.detach().numpy().copy())
            grads.append(target.grad.numpy().copy())
    return np.stack(roots), np.stack(grads)


def difference_grads64(model, groups: list, d_roots, weight: str, reference, entries: int = 8,
                       seed: int = 0, eps: float = 1e-6):
    """Central differences of `reference` (models.reference64) in float64 at `entries` sampled
    entries of `weight`: (index (entries, ndim), values (batches, entries)).  For an orchestrator
    without torch; it costs 2 * entries reference evaluations per batch."""
    shape = model.weights[weight].shape
    rng = np.random.default_rng(seed)
    index = np.stack([rng.integers(0, s, entries) for s in shape], 1)
    direction = np.asarray(d_roots, np.float64)
    saved = model.weights
    values = np.zeros((len(groups), entries))
    try:
        for j, idx in enumerate(map(tuple, index)):
            for sign in (1.0, -1.0):
                moved = {k: np.array(v, np.float64) for k, v in saved.items()}
                moved[weight][idx] += sign * eps
                model.weights = moved
                for k, group in enumerate(groups):
                    values[k, j] += sign * float((reference(model, group) * direction).sum()) / (2 * eps)
    finally:
        model.weights = saved
    return index, values
