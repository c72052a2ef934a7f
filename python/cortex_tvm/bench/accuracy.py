"""How far bf16 moves the roots: every zoo model, fp32 and bf16 builds, against float64.

    python -m cortex_tvm.bench.accuracy --hidden 150 256 512 --batches 10

For each model and hidden size: the bench's batches of SST trees (each model on its own
structures, as `cortex-tvm bench` runs them), the roots of `compile()` and of
`compile(precision="bf16")`, and for TreeLSTM and TreeFC PyTorch by height under
`torch.autocast("cpu", dtype=torch.bfloat16)` on the same weights, each against the
float64 per-node reference of the float32 weights (`models.reference64`).  Prints the max
and mean absolute error of the roots and writes the rows as JSON lines (`--out`).
No timing: nothing here needs the cores to itself.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile

import numpy as np

from .. import data
from ..models import reference64
from . import MODELS, torch_worker
from .case_data import write_case
from .cases import TORCH_MODELS, hidden_for, make_model, structures
from .common import batch_starts


def _errors(out, ref) -> dict:
    diff = np.abs(np.asarray(out, np.float64) - ref)
    return {"max_abs_err": float(diff.max()), "mean_abs_err": float(diff.mean())}


def _torch_bf16(name, model, trees, index, batch):
    """PyTorch by height under bf16 autocast: the roots of every batch, or None without torch."""
    try:
        import torch              # optional, as in the bench: no torch, no autocast row
    except ImportError:
        return None
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "case.npz")
        write_case(path, model, name, trees, batch, len(index) // batch)
        kind, H, weights, batches = torch_worker.load(path)
    with torch.inference_mode():
        fp32 = torch_worker.make_system("torch-levels", kind, H, {k: torch.from_numpy(v) for k, v in weights.items()})
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return [fp32(b).float().numpy() for b in batches]


def measure(name: str, hidden: int, batches: int, batch: int = 10) -> list:
    """Rows {model, hidden, system, max_abs_err, mean_abs_err} for one model and size."""
    trees, vocab = data.sst_sample()
    model = make_model(name, hidden, len(vocab))
    starts = batch_starts(len(trees), batch, batches)
    index = [s + k for s in starts for k in range(batch)]
    groups = [structures(name, [trees[i] for i in index[k:k + batch]]) for k in range(0, len(index), batch)]
    ref = np.concatenate([reference64(model, g) for g in groups])
    rows = []
    for precision in ("fp32", "bf16"):
        compiled = model.compile(precision=precision)
        out = np.concatenate([compiled(g) for g in groups])
        rows.append({"system": "cortex_tvm" + ("" if precision == "fp32" else "-bf16"),
                     "bf16_weights": list(compiled.plan.bf16_weights), **_errors(out, ref)})
    if name in TORCH_MODELS:
        got = _torch_bf16(name, model, trees, index, batch)
        if got is not None:
            rows.append({"system": "torch-levels-bf16 (autocast)", **_errors(np.concatenate(got), ref)})
    base = {"model": type(model).__name__, "hidden": hidden_for(name, hidden), "trees": len(index)}
    return [{**base, **row} for row in rows]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cortex_tvm.bench.accuracy", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=MODELS)
    parser.add_argument("--hidden", nargs="+", type=int, default=[150, 256, 512])
    parser.add_argument("--batches", type=int, default=10, help="batches of 10 SST trees per case")
    parser.add_argument("--out", default=None, help="JSON lines, one per row (default: none)")
    args = parser.parse_args(argv)
    out = open(args.out, "w", encoding="utf-8") if args.out else None
    print(f"{'model':17s} {'H':>4s} {'system':29s} {'max|err|':>9s} {'mean|err|':>9s}")
    for name in args.models:
        for hidden in sorted({hidden_for(name, h) for h in args.hidden}):     # MV-RNN's sizes are capped
            for row in measure(name, hidden, args.batches):
                print(f"{row['model']:17s} {row['hidden']:4d} {row['system']:29s} "
                      f"{row['max_abs_err']:9.2e} {row['mean_abs_err']:9.2e}", flush=True)
                if out:
                    out.write(json.dumps(row) + "\n")
    if out:
        out.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
