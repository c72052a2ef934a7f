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
