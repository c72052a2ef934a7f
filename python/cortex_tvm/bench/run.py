"""The bench orchestrator: writes the shared data, runs every worker in its own process, reports.

For each (model, H, batch) one .npz holds everything the workers share: the
model's seeded weights, the batches (SST tree indices for cortex_tvm/numpy;
flat post-order arrays for the standalone torch worker) and the useful FLOPs
of each batch; the orchestrator keeps the float64 reference roots of every
batch (`models.reference64`).  Then ``for round: for (model, H, batch): for
system: run a worker``, each worker a fresh process with every runtime's
thread pool set to --threads, writing the roots of every batch, which are
checked against the reference (`check.py`); a system's figure is its best
round, and any wrong batch of any round fails the command.

`--train`: each worker times one training step per batch (forward, loss = sum(roots * R),
backward to every weight's gradient, then the same torch.optim.Adagrad step on every side,
`common.TRAIN_OPTIMIZER` (-ours: ours through cortex_tvm.optim.Adagrad), unless --optimizer none;
R, (B, H), fixed and seeded, is in the npz as d_roots)
and also writes the gradient of one weight per batch (common.GRAD_WEIGHT: U of TreeLSTM, W of
TreeFC), checked like the roots against a float64 reference: PyTorch autograd through an eager
per-node recursion when this Python has torch, else central differences of `reference64` at a
few sampled entries (`check.py`).  A wrong gradient fails the command like a wrong root.

The case files and references are `case_data.py`'s, the rows and tables `report.py`'s.
"""
from __future__ import annotations

import datetime
import importlib.util
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
import time

import numpy as np
import tvm

from .. import data, dot_bf16
from ..recipes import bf16_products
from ..target import host_features, make_target
from ..version import __version__
from . import BF16_SYSTEMS, TORCH_SYSTEMS, TRAIN_MODELS, TRAIN_SYSTEMS
from .case_data import case_groups, reference_grads, train_direction, write_case
from .cases import EMBED_MODELS, FEATURE_MODELS, TORCH_MODELS, make_model
from .check import (BF16_GRAD_TOLERANCE, BF16_TOLERANCE, GRAD_TOLERANCE, TOLERANCE, check_grads, check_roots,
                    grad_tolerance_of, tolerance_of)
from .common import GRAD_WEIGHT, TRAIN_FLOPS_FACTOR, cpu_model, thread_env, train_optimizer, train_step_parts
from .report import case_record, peak_gflops, print_tables, summarize

TORCH_WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "torch_worker.py")


def _apply_quick(args):
    if args.quick:
        args.models, args.hidden, args.batch = args.models[:1], [64], [10]
        args.batches, args.repeats, args.rounds = 3, 3, 1
    for name in ("batches", "repeats", "rounds", "threads"):
        if getattr(args, name) < 1:
            raise SystemExit(f"cortex-tvm bench: --{name} must be >= 1")
    if getattr(args, "features", None) is not None:
        if args.features < 1:
            raise SystemExit("cortex-tvm bench: --features must be >= 1")
        other = [m for m in args.models if m not in FEATURE_MODELS]
        if other:
            raise SystemExit(f"cortex-tvm bench --features: models fed per-node features are "
                             f"{', '.join(FEATURE_MODELS)}, not {', '.join(other)}")
        if getattr(args, "train", False):
            raise SystemExit("cortex-tvm bench --features: inference only (no --train)")
    if getattr(args, "train", False):
        other = [m for m in args.models if m not in TRAIN_MODELS]
        if other:
            raise SystemExit(f"cortex-tvm bench --train: training steps are timed for {', '.join(TRAIN_MODELS)} "
                             f"only (the models with PyTorch baselines), not {', '.join(other)}")
        if getattr(args, "precision", "fp32") == "bf16" and dot_bf16.FEATURE not in host_features():
            raise SystemExit("cortex-tvm bench --train --precision bf16: a bf16 training step multiplies on "
                             "AVX512_BF16's vdpbf16ps, which this CPU lacks")
        if train_optimizer(args) is not None and not orchestrator_has_torch():
            raise SystemExit("cortex-tvm bench --train: the optimizer step is torch.optim.Adagrad on every side, "
                             "and this Python has no torch: pip install 'cortex_tvm[torch]', or --optimizer none")
    if getattr(args, "embed", None) is not None:
        if args.embed < 1:
            raise SystemExit("cortex-tvm bench: --embed must be >= 1")
        if getattr(args, "features", None) is not None:
            raise SystemExit("cortex-tvm bench: --embed is the word vectors' width; with --features the "
                             "features' width is the input's (give one of them)")
        other = [m for m in args.models if m not in EMBED_MODELS]
        if other:
            raise SystemExit(f"cortex-tvm bench --embed: the models whose word width may differ from H are "
                             f"{', '.join(EMBED_MODELS)}, not {', '.join(other)} (their words are states)")


def _worker_json(cmd, env, timeout):
    """Run one worker; (result dict, None) or (None, error text)."""
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, f"timed out after {timeout:.0f} s"
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-8:]
        return None, f"exit {proc.returncode}: " + " | ".join(tail)
    try:
        return json.loads(lines[-1]), None
    except json.JSONDecodeError as e:
        return None, f"bad JSON from worker: {e}"


def orchestrator_has_torch() -> bool:
    """Whether this Python has torch (`--train`'s float64 reference gradients use it)."""
    return importlib.util.find_spec("torch") is not None


def find_torch_python(explicit, threads):
    """(python path or None, probe dict or None, reason when None)."""
    candidates = []
    if explicit:
        candidates.append(explicit)
    elif importlib.util.find_spec("torch") is not None:
        candidates.append(sys.executable)
    if not candidates:
        return None, None, "no torch in this Python and no --torch-python given"
    python = candidates[0]
    result, err = _worker_json([python, TORCH_WORKER, "--probe"], thread_env(threads), 300)
    if result is None:
        return None, None, f"{python}: probe failed ({err})"
    if not result.get("torch"):
        return None, result, f"{python}: {result.get('torch_error', 'no torch')}"
    return python, result, None


def _meta(args, torch_python, probe, skipped):
    meta = {
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "cpu": cpu_model(), "cpu_count": os.cpu_count(), "threads": args.threads,
        "python": platform.python_version(), "cortex_tvm": __version__, "tvm": tvm.__version__,
        "numpy": np.__version__, "torch_python": torch_python,
        "torch": (probe or {}).get("torch"), "dgl": (probe or {}).get("dgl"),
        "torch_numpy": (probe or {}).get("numpy"), "skipped": skipped,
        "loadavg_start": list(os.getloadavg()),
        "metric": "mean over batches of the per-batch minimum over repeats (after warm-up), best round; "
                  "each system in its own process",
        "check": f"every batch's roots vs the float64 per-node reference (models.reference64): "
                 f"max|err| <= {TOLERANCE} * max(1, max|ref|) per batch ({BF16_TOLERANCE} for the -bf16 "
                 f"systems), every round",
        "args": {k: v for k, v in vars(args).items() if k != "run"},
    }
    mcpu = getattr(args, "mcpu", None)
    target = make_target({"kind": "llvm", "mcpu": mcpu} if mcpu else "llvm")
    meta["llvm_cpu"] = str(target.attrs.get("mcpu", "")) or "generic"
    meta["bf16_products"] = {"amx": "AMX tiles", "vdpbf16ps": "vdpbf16ps",
                             "storage": "float32 FMAs (storage only)"}[bf16_products(target)]
    if getattr(args, "train", False):
        meta.update(
            mode="train",
            metric=f"training step ({train_step_parts(args)}): forward on the batch, loss = sum(roots * R) for a "
                   "fixed seeded R (B, H), backward to the gradients of every weight"
                   + (", then the optimizer's step" if train_optimizer(args) else "")
                   + "; mean over batches of the per-batch minimum over repeats (after a warm-up step per batch, "
                   "no optimizer step in it), best round; each system in its own process",
            optimizer=train_optimizer(args),
            check=meta["check"] + f"; the gradient of {' / '.join(f'{v} ({k})' for k, v in GRAD_WEIGHT.items())} "
                  f"of every batch vs a float64 reference: max|err| <= {GRAD_TOLERANCE} * max|ref| per batch "
                  f"({BF16_GRAD_TOLERANCE} for a -bf16 system's)",
            flops=f"GFLOP/s count {TRAIN_FLOPS_FACTOR}x the forward's useful FLOPs per step")
    return meta


def bench(args) -> int:
    _apply_quick(args)
    out_path = args.out or f"bench-{datetime.datetime.now():%Y%m%d-%H%M%S}.json"
    systems = list(dict.fromkeys(args.systems))
    if getattr(args, "precision", "fp32") == "bf16":
        systems = [s for system in systems for s in (system, BF16_SYSTEMS.get(system)) if s]
    train = bool(getattr(args, "train", False))
    env = thread_env(args.threads)
    started = time.time()

    torch_python, probe, torch_reason = (None, None, None)
    skipped = {}                                          # system -> reason
    if train:
        skipped.update({s: f"no training step in the bench (--train times {', '.join(TRAIN_SYSTEMS)})"
                        for s in systems if s not in TRAIN_SYSTEMS})
    if any(s in TORCH_SYSTEMS and s not in skipped for s in systems):
        torch_python, probe, torch_reason = find_torch_python(args.torch_python, args.threads)
        if torch_python is None:
            skipped.update({s: f"not installed ({torch_reason})" for s in systems
                            if s in TORCH_SYSTEMS and s not in skipped})
        elif "dgl" in systems and "dgl" not in skipped and not probe.get("dgl"):
            skipped["dgl"] = f"not installed ({probe.get('dgl_error', 'no dgl')})"
    meta = _meta(args, torch_python, probe, skipped)
    print(f"cortex-tvm bench: {args.threads} threads, {meta['cpu']}, loadavg {meta['loadavg_start'][0]:.2f}")
    print(f"  cortex_tvm {__version__}, tvm {meta['tvm']}, numpy {np.__version__}, "
          f"torch {meta['torch']}, dgl {meta['dgl']} ({torch_python or 'no torch python'})")
    print(f"  cortex_tvm compiled for mcpu={getattr(args, 'mcpu', None) or 'this CPU'} (LLVM CPU model "
          f"{meta['llvm_cpu']}; precision='bf16' multiplies with {meta['bf16_products']})")
    use_torch = train and orchestrator_has_torch()
    if train:
        meta["grad_reference"] = ("float64 PyTorch autograd, eager per-node recursion" if use_torch else
                                  "central differences of models.reference64 at sampled entries (no torch here)")
        print(f"  TRAINING STEPS ({train_step_parts(args)}); gradients checked against {meta['grad_reference']}")
    if getattr(args, "embed", None) is not None:
        print(f"  INPUTS: word vectors of width x = {args.embed} (the models' embed_size), every H")
    if getattr(args, "features", None) is not None:
        print(f"  INPUTS: {args.features} seeded float32 features per node (inputs='features'), passed with each "
              f"batch; the PyTorch baselines gather the same rows")
    for system, reason in skipped.items():
        print(f"  {system}: skipped, {reason}")

    trees, vocab = data.sst_sample()
    runs, failures = [], []
    with tempfile.TemporaryDirectory(prefix="cortex-bench-") as tmp:
        cases = []
        for name in args.models:
            for H in args.hidden:
                model = make_model(name, H, len(vocab), getattr(args, "features", None), getattr(args, "embed", None))
                for B in args.batch:
                    path = os.path.join(tmp, f"{name}-{H}-{B}.npz")
                    flops, nodes, ref = write_case(path, model, name, trees, B, args.batches, train=train,
                                                   features=getattr(args, "features", None),
                                                   optimizer=train_optimizer(args) if train else None)
                    cases.append({"model": name, "hidden": H, "embed": getattr(model, "embed_size", None),
                                  "batch": B, "path": path,
                                  "flops": flops, "nodes": nodes, "ref": ref})
                    if train:
                        _, groups = case_groups(name, trees, B, args.batches)
                        cases[-1]["grad_ref"] = reference_grads(model, name, groups, train_direction(
                            B, model.hidden_size), ref, use_torch)
                        cases[-1]["train_flops"] = TRAIN_FLOPS_FACTOR * flops

        def launch(system, case, rnd):
            if system in ("cortex_tvm", "cortex_tvm-bf16", "numpy", "sgemm"):
                cmd = [sys.executable, "-m", "cortex_tvm.bench.worker", system]
            else:
                cmd = [torch_python, TORCH_WORKER, system]
            roots, grads = os.path.join(tmp, "roots.npy"), os.path.join(tmp, "grads.npy")
            for stale in (roots, grads):       # a failed run's: never read as the next one's
                if os.path.exists(stale):
                    os.remove(stale)
            if case is not None:
                cmd += [case["path"], "--roots", roots]
                if train:
                    cmd += ["--train", "--grads", grads]
            cmd += ["--repeats", str(args.repeats), "--threads", str(args.threads)]
            if system.startswith("cortex_tvm") and getattr(args, "mcpu", None):
                cmd += ["--mcpu", args.mcpu]
            t0 = time.perf_counter()
            # our side's torch (its optimizer) waits passively, as docs/training.md tells a user; set
            # here, before the worker imports tvm (tvm_ffi imports torch, which reads it then)
            passive = system.startswith("cortex_tvm") and train and train_optimizer(args) is not None
            result, err = _worker_json(cmd, {**env, "OMP_WAIT_POLICY": "PASSIVE"} if passive else env, args.timeout)
            where = "" if case is None else f"{case['model']:8s} H={case['hidden']:<4d} B={case['batch']:<3d}"
            row = {"system": system, "round": rnd, "wall_s": round(time.perf_counter() - t0, 2)}
            if case is not None:
                row.update({k: case[k] for k in ("model", "hidden", "batch")})
            if result is None:
                row["error"] = err
                failures.append(f"{system} {where}: {err}")
                print(f"  round {rnd + 1} {system:12s} {where} FAILED: {err}", flush=True)
                runs.append(row)
                return
            result.pop("system", None)
            row.update(result)
            if system == "sgemm":
                peak = (f"FMA peak {row['peak_gflops']:.1f} GFLOP/s" if "peak_gflops" in row
                        else f"FMA peak failed: {row.get('peak_error')}")
                what = f"{row['gflops']:.1f} GFLOP/s, {peak}"
            else:
                row.update(check_roots(_load_roots(roots), case["ref"], tolerance_of(system)))
                wrong = f"  WRONG in batches {row['wrong_batches']}" if row["wrong_batches"] else ""
                if train:
                    row.update(check_grads(_load_roots(grads), case["grad_ref"], grad_tolerance_of(system)))
                    if row["grad_wrong_batches"]:
                        wrong += f"  GRADIENT WRONG in batches {row['grad_wrong_batches']}"
                    if train_optimizer(args) and not 0 < row.get("weight_moved", 0) < math.inf:
                        wrong += f"  OPTIMIZER: its steps moved {row['grad_weight']} by {row.get('weight_moved')}"
                        failures.append(f"{system} {where}: the optimizer's steps moved {row['grad_weight']} by "
                                        f"{row.get('weight_moved')} (none, or not finite)")
                    what = (f"{row['ms']:.3f} ms/step  (max|err| {row['max_abs_err']:.1e}, "
                            f"d{row['grad_weight']} rel err {row['grad_max_rel_err']:.1e}){wrong}")
                else:
                    what = f"{row['ms']:.3f} ms  (max|err| {row['max_abs_err']:.1e}){wrong}"
            print(f"  round {rnd + 1} {system:12s} {where} {what}", flush=True)
            runs.append(row)

        for rnd in range(args.rounds):
            launch("sgemm", None, rnd)
            for case in cases:
                for system in systems:
                    if system in skipped:
                        continue
                    if system in TORCH_SYSTEMS and case["model"] not in TORCH_MODELS:
                        if rnd == 0:
                            print(f"  {system}: no baseline for {case['model']} in the bench", flush=True)
                        continue
                    launch(system, case, rnd)

    rows, wrong, sgemm_gflops = summarize(cases, runs, systems, skipped)
    meta["loadavg_end"] = list(os.getloadavg())
    meta["elapsed_s"] = round(time.time() - started, 1)
    meta["sgemm_gflops"] = sgemm_gflops
    meta["peak_gflops"] = peak_gflops(runs)
    print_tables(rows, cases, systems, sgemm_gflops, args, meta["peak_gflops"])
    with open(out_path, "w") as f:
        json.dump({"meta": meta, "sgemm": [r for r in runs if r["system"] == "sgemm" and "error" not in r],
                   "cases": [case_record(c) for c in cases],
                   "rows": rows, "runs": runs}, f, indent=1)
    print(f"\nwrote {out_path} (loadavg {meta['loadavg_start'][0]:.2f} -> {meta['loadavg_end'][0]:.2f}, "
          f"{meta['elapsed_s']:.0f} s)")
    status = 0
    grads = (f"; gradients {GRAD_TOLERANCE} * max|ref grad| per batch ({BF16_GRAD_TOLERANCE} for -bf16 rows)"
             if train else "")
    for title, lines in ((f"results differ from the float64 reference by more than their tolerance "
                          f"({TOLERANCE} * max(1, max|ref|) per batch{grads}):", wrong),
                         ("workers failed:", failures)):
        if lines:
            print(f"\nERROR: {title}", file=sys.stderr)
            for line in lines:
                print("  " + line, file=sys.stderr)
            status = 1
    return status


def _load_roots(path):
    """A worker's roots, None when it wrote none (or something unreadable)."""
    try:
        return np.load(path)
    except (OSError, ValueError):
        return None
