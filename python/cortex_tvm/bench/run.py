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
backward to every weight's gradient; R, (B, H), fixed and seeded, is in the npz as d_roots)
and also writes the gradient of one weight per batch (common.GRAD_WEIGHT: U of TreeLSTM, W of
TreeFC), checked like the roots against a float64 reference: PyTorch autograd through an eager
per-node recursion when this Python has torch, else central differences of `reference64` at a
few sampled entries (`check.py`).  A wrong gradient fails the command like a wrong root.
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

from .. import data
from ..models import reference64
from ..version import __version__
from . import BF16_SYSTEMS, TORCH_SYSTEMS, TRAIN_MODELS, TRAIN_SYSTEMS
from .cases import FEATURE_MODELS, MODEL_CLASSES, TORCH_MODELS, feature_rows, hidden_for, make_model, structures
from .check import (BF16_TOLERANCE, GRAD_TOLERANCE, TOLERANCE, check_grads, check_roots, difference_grads64,
                    grad_wrong_lines, tolerance_of, torch_grads64, wrong_lines)
from .common import GRAD_WEIGHT, TRAIN_FLOPS_FACTOR, TRAIN_SEED, batch_starts, cpu_model, thread_env

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
        if getattr(args, "precision", "fp32") != "fp32":
            raise SystemExit("cortex-tvm bench --train: training is float32 (no --precision bf16)")


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


def case_groups(name, trees, batch, batches):
    """(the SST tree index of every batch's trees, flat; the structures of each batch)."""
    starts = batch_starts(len(trees), batch, batches)
    index = np.array([s + k for s in starts for k in range(batch)], np.int64)
    groups = [structures(name, [trees[i] for i in index[k:k + batch]]) for k in range(0, len(index), batch)]
    return index, groups


def train_direction(batch, hidden):
    """`--train`'s fixed loss direction R, (batch, hidden) float32: loss = sum(roots * R)."""
    return np.random.default_rng([TRAIN_SEED, batch, hidden]).standard_normal((batch, hidden)).astype(np.float32)


def write_case(path, model, name, trees, batch, batches, train=False, features=None):
    """The npz for one (model, H, batch); returns (mean useful FLOPs per batch, mean nodes per batch,
    the float64 reference roots of every batch, (batches, B, *state)).

    Binary-tree models also get flat post-order arrays (word/left/right) for
    the standalone torch worker; other models run on `cases.structures`.
    train=True: also the loss direction d_roots (`train_direction`) and grad_weight, the name
    of the weight whose gradient the workers write.
    features=F: every node's F features (`cases.feature_rows`), all batches' rows in one array
    `features` split by `feature_offsets`; the torch worker reads them as its embedding table,
    each leaf's word being its row (the same gather a per-node-features PyTorch model does).
    """

    index, groups = case_groups(name, trees, batch, batches)
    arrays = _torch_arrays([trees[i] for i in index]) if name in TORCH_MODELS else {}
    rows, weights = None, dict(model.weights)
    if features is not None:
        rows = feature_rows(groups, features)
        arrays.update(features=np.concatenate(rows), feature_offsets=np.cumsum([0] + [len(r) for r in rows]))
        if "word" in arrays:
            arrays["word"] = np.where(arrays["word"] >= 0, np.arange(len(arrays["word"])), -1)
            weights["emb"] = arrays["features"]
    if train:
        arrays.update(d_roots=train_direction(batch, model.hidden_size), grad_weight=np.array(GRAD_WEIGHT[name]))
    flops = [model.flops(model.linearize(g)) for g in groups]        # pad=1: real nodes only
    nodes = sum(len(data.dag_postorder(t)) for g in groups for t in g) / len(groups)
    np.savez(path, model=np.array(name), hidden=np.array(model.hidden_size), batch=np.array(batch),
             tree_index=index, flops=np.array(flops), **arrays, **{"w_" + k: v for k, v in weights.items()})
    refs = [reference64(model, g) if rows is None else reference64(model, g, features=rows[k])
            for k, g in enumerate(groups)]
    return float(np.mean(flops)), nodes, np.stack(refs)


def reference_grads(model, name, groups, d_roots, ref_roots, use_torch):
    """The float64 reference gradient of GRAD_WEIGHT[name] per batch, for `check.check_grads`:
    PyTorch autograd through an eager per-node recursion (its roots must equal `ref_roots`, the
    `reference64` ones, to 1e-9), or (use_torch False) central differences of `reference64`."""
    weight = GRAD_WEIGHT[name]
    base = {"weight": weight, "shape": tuple(model.weights[weight].shape)}
    if use_torch:
        roots, grads = torch_grads64(name, model.weights, groups, d_roots, weight)
        err = float(np.max(np.abs(roots - ref_roots)))
        if not err <= 1e-9 * max(1.0, float(np.max(np.abs(ref_roots)))):
            raise RuntimeError(f"bench --train: the float64 PyTorch reference of {name} disagrees with "
                               f"models.reference64 by {err:.3g} (a harness bug)")
        return {**base, "method": "float64 PyTorch autograd, eager per-node recursion", "index": None, "ref": grads}
    index, values = difference_grads64(model, groups, d_roots, weight, reference64)
    return {**base, "method": f"central differences of models.reference64 at {len(index)} sampled entries",
            "index": index, "ref": values}


def _torch_arrays(trees) -> dict:
    """Flat post-order word/left/right/height arrays of binary trees, and per-tree offsets."""

    words, lefts, rights, heights, offsets = [], [], [], [], [0]
    for i, tree in enumerate(trees):
        nodes = data.postorder(tree)
        pos = {id(n): k for k, n in enumerate(nodes)}
        n = len(nodes)
        word, left, right = (np.full(n, -1, np.int64) for _ in range(3))
        height = np.zeros(n, np.int64)
        for k, node in enumerate(nodes):
            if node.children is None:
                word[k] = node.word
            else:
                if len(node.children) != 2:
                    raise ValueError(f"tree {i}: the torch baselines need binary trees "
                                     f"(a node has {len(node.children)} children)")
                left[k], right[k] = pos[id(node.children[0])], pos[id(node.children[1])]
                height[k] = 1 + max(height[left[k]], height[right[k]])
        words.append(word), lefts.append(left), rights.append(right), heights.append(height)
        offsets.append(offsets[-1] + n)
    return {"word": np.concatenate(words), "left": np.concatenate(lefts), "right": np.concatenate(rights),
            "height": np.concatenate(heights), "tree_offsets": np.array(offsets, np.int64)}


def _fmt_ms(ms):
    return f"{ms:9.3f}" if ms < 100 else f"{ms:9.1f}"


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
    if getattr(args, "train", False):
        meta.update(
            mode="train",
            metric="training step (forward + backward): forward on the batch, loss = sum(roots * R) for a fixed "
                   "seeded R (B, H), backward to the gradients of every weight; mean over batches of the per-batch "
                   "minimum over repeats (after a warm-up step per batch), best round; each system in its own "
                   "process",
            check=meta["check"] + f"; the gradient of {' / '.join(f'{v} ({k})' for k, v in GRAD_WEIGHT.items())} "
                  f"of every batch vs a float64 reference: max|err| <= {GRAD_TOLERANCE} * max|ref| per batch",
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
    print(f"  cortex_tvm compiled for mcpu={getattr(args, 'mcpu', None) or 'this CPU'}")
    use_torch = train and orchestrator_has_torch()
    if train:
        meta["grad_reference"] = ("float64 PyTorch autograd, eager per-node recursion" if use_torch else
                                  "central differences of models.reference64 at sampled entries (no torch here)")
        print(f"  TRAINING STEPS (forward + backward to every weight's gradient); gradients checked against "
              f"{meta['grad_reference']}")
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
                model = make_model(name, H, len(vocab), getattr(args, "features", None))
                for B in args.batch:
                    path = os.path.join(tmp, f"{name}-{H}-{B}.npz")
                    flops, nodes, ref = write_case(path, model, name, trees, B, args.batches, train=train,
                                                   features=getattr(args, "features", None))
                    cases.append({"model": name, "hidden": H, "batch": B, "path": path,
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
            result, err = _worker_json(cmd, env, args.timeout)
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
                    row.update(check_grads(_load_roots(grads), case["grad_ref"]))
                    if row["grad_wrong_batches"]:
                        wrong += f"  GRADIENT WRONG in batches {row['grad_wrong_batches']}"
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
                   "cases": [_case_record(c) for c in cases],
                   "rows": rows, "runs": runs}, f, indent=1)
    print(f"\nwrote {out_path} (loadavg {meta['loadavg_start'][0]:.2f} -> {meta['loadavg_end'][0]:.2f}, "
          f"{meta['elapsed_s']:.0f} s)")
    status = 0
    grads = f"; gradients {GRAD_TOLERANCE} * max|ref grad| per batch" if train else ""
    for title, lines in ((f"results differ from the float64 reference by more than their tolerance "
                          f"({TOLERANCE} * max(1, max|ref|) per batch{grads}):", wrong),
                         ("workers failed:", failures)):
        if lines:
            print(f"\nERROR: {title}", file=sys.stderr)
            for line in lines:
                print("  " + line, file=sys.stderr)
            status = 1
    return status


def _case_record(case):
    """A case for the JSON: no paths or arrays; with --train, how its gradients were checked."""
    out = {k: v for k, v in case.items() if k not in ("path", "ref", "grad_ref")}
    if "grad_ref" in case:
        g = case["grad_ref"]
        out["grad_check"] = {"weight": g["weight"], "method": g["method"], "tolerance": GRAD_TOLERANCE,
                             "entries": None if g["index"] is None else np.asarray(g["index"]).tolist(),
                             "ref_max_abs": [float(np.max(np.abs(r))) for r in g["ref"]]}
    return out


def _load_roots(path):
    """A worker's roots, None when it wrote none (or something unreadable)."""
    try:
        return np.load(path)
    except (OSError, ValueError):
        return None


def peak_gflops(runs):
    """The best FMA peak (`bench/peak.py`) of the rounds' sgemm runs, or None."""
    return max((r["peak_gflops"] for r in runs if r["system"] == "sgemm" and "peak_gflops" in r), default=None)


def summarize(cases, runs, systems, skipped):
    """(rows: each system's best round per case, with its errors over every round; the lines of
    every wrong batch or non-finite time; the best sgemm GFLOP/s or None)."""
    rows, wrong = [], []
    ok = [r for r in runs if "error" not in r]
    sgemm_gflops = max((r["gflops"] for r in ok if r["system"] == "sgemm"), default=None)
    peak = peak_gflops(ok)
    for case in cases:
        key = (case["model"], case["hidden"], case["batch"])
        where = f"{key[0]} H={key[1]} B={key[2]}"
        mine = [r for r in ok if r["system"] != "sgemm" and (r["model"], r["hidden"], r["batch"]) == key]
        best = {}
        for system in systems:
            got = [r for r in mine if r["system"] == system]
            base = {"system": system, "model": key[0], "hidden": key[1], "batch": key[2]}
            if system in skipped or (system in TORCH_SYSTEMS and key[0] not in TORCH_MODELS):
                rows.append({**base, "skipped": skipped.get(system, f"no {system} baseline for {key[0]} in the bench")})
                continue
            if not got:
                rows.append({**base, "error": "every round failed"})
                continue
            b = best[system] = min(got, key=lambda r: r["ms"])
            for r in got:
                wrong.extend(wrong_lines(system, where, r, r["round"]))
                wrong.extend(grad_wrong_lines(system, where, r, r["round"]))
                if not math.isfinite(r["ms"]):
                    wrong.append(f"{system} {where}: non-finite time {r['ms']}")
            row = {k: v for k, v in b.items() if k not in ("round", "wall_s")}
            # GFLOP/s count the work each system does at run time (hoisted leaves are not); a
            # training step: TRAIN_FLOPS_FACTOR x the forward's useful FLOPs, the same for everyone
            flops = case["train_flops"] if "train_flops" in case else b.get("runtime_flops", case["flops"])
            # errors: the worst of every round, batch by batch
            row.update(best_round=b["round"], rounds_ms=[r["ms"] for r in got],
                       max_abs_err=max(r["max_abs_err"] for r in got),
                       batch_abs_err=[max(errs) for errs in zip(*(r["batch_abs_err"] for r in got))],
                       wrong_batches=sorted({k for r in got for k in r["wrong_batches"]}),
                       mean_nodes=case["nodes"], mflop=flops / 1e6, gflops=flops / (b["ms"] * 1e-3) / 1e9)
            if all("grad_batch_abs_err" in r for r in got):      # --train: the gradient, every round
                row.update(grad_max_abs_err=max(r["grad_max_abs_err"] for r in got),
                           grad_max_rel_err=max(r["grad_max_rel_err"] for r in got),
                           grad_batch_abs_err=[max(e) for e in zip(*(r["grad_batch_abs_err"] for r in got))],
                           grad_batch_rel_err=[max(e) for e in zip(*(r["grad_batch_rel_err"] for r in got))],
                           grad_wrong_batches=sorted({k for r in got for k in r["grad_wrong_batches"]}))
            rows.append(row)
        ours, ours_bf16 = best.get("cortex_tvm"), best.get("cortex_tvm-bf16")
        for row in rows[-len(systems):]:
            if ours is not None and "ms" in row:
                row["ratio"] = row["ms"] / ours["ms"]
            if ours_bf16 is not None and "ms" in row:
                row["ratio_bf16"] = row["ms"] / ours_bf16["ms"]
        if ours is not None and sgemm_gflops and "backward_ms" in ours:
            # the backward alone: the products dW = dy x^T and dx = W^T dy, 2x the forward's FLOPs
            backward_gflops = (TRAIN_FLOPS_FACTOR - 1) * case["flops"] / (ours["backward_ms"] * 1e-3) / 1e9
            case.update(cortex_tvm_backward_ms=ours["backward_ms"], cortex_tvm_backward_gflops=backward_gflops,
                        cortex_tvm_backward_pct_of_sgemm=100 * backward_gflops / sgemm_gflops)
        if ours is not None and sgemm_gflops and "train_flops" not in case:
            flops = ours.get("runtime_flops", case["flops"])
            case["cortex_tvm_runtime_mflop"] = flops / 1e6
            case["cortex_tvm_pct_of_sgemm"] = 100 * (flops / (ours["ms"] * 1e-3) / 1e9) / sgemm_gflops
            if peak:
                case["cortex_tvm_pct_of_peak"] = 100 * (flops / (ours["ms"] * 1e-3) / 1e9) / peak
    return rows, wrong, sgemm_gflops


def print_tables(rows, cases, systems, sgemm_gflops, args, peak=None):
    train = bool(getattr(args, "train", False))
    sg = f"{sgemm_gflops:.1f} GFLOP/s" if sgemm_gflops else "failed"
    print(f"\nsgemm (numpy float32 1024^3, {args.threads} threads): {sg}")
    if peak:
        print(f"this CPU's fp32 FMA peak (bench/peak.py, {args.threads} threads): {peak:.1f} GFLOP/s")
    if train:
        print(f"TRAINING STEPS: ms = one training step per batch (forward, loss = sum(roots * R), backward to the "
              f"gradients of every weight); GFLOP/s count {TRAIN_FLOPS_FACTOR}x the forward's useful FLOPs")
    print(f"metric: mean over {args.batches} batches of the best of {args.repeats} runs, "
          f"best of {args.rounds} round(s); ratio = system / cortex_tvm (x slower than ours)"
          + ("; vs bf16 = system / cortex_tvm-bf16" if "cortex_tvm-bf16" in systems else ""))
    for case in cases:
        key = (case["model"], case["hidden"], case["batch"])
        what = (f"training step (forward + backward), {case['flops'] / 1e6:.1f} MFLOP forward per batch"
                if train else f"{case['flops'] / 1e6:.1f} MFLOP per batch")
        print(f"\n{MODEL_CLASSES[key[0]]} H={hidden_for(key[0], key[1])} batch={key[2]}: {case['nodes']:.0f} nodes, "
              + what)
        bf16 = "cortex_tvm-bf16" in systems
        print(f"  {'system':17s} {'ms/step' if train else 'ms':>9s} {'ratio':>7s}" + (f" {'vs bf16':>7s}" if bf16 else "")
              + f" {'GFLOP/s':>8s} {'max|err|':>10s}"
              + (f" {'d' + GRAD_WEIGHT.get(key[0], '?') + ' rel err':>12s}" if train else ""))
        for row in rows:
            if (row["model"], row["hidden"], row["batch"]) != key:
                continue
            if "ms" not in row:
                print(f"  {row['system']:17s} {row.get('skipped') or row.get('error')}")
                continue
            ratio = f"{row['ratio']:7.2f}" if "ratio" in row else f"{'-':>7s}"
            if bf16:
                ratio += f" {row['ratio_bf16']:7.2f}" if "ratio_bf16" in row else f" {'-':>7s}"
            flag = f"  <-- WRONG in batches {row['wrong_batches']}" if row["wrong_batches"] else ""
            grad = ""
            if train:
                grad = f" {row['grad_max_rel_err']:12.1e}" if "grad_max_rel_err" in row else f" {'-':>12s}"
                if row.get("grad_wrong_batches"):
                    flag += f"  <-- GRADIENT WRONG in batches {row['grad_wrong_batches']}"
            print(f"  {row['system']:17s} {_fmt_ms(row['ms'])} {ratio} {row['gflops']:8.1f} "
                  f"{row['max_abs_err']:10.1e}{grad}{flag}")
        if "cortex_tvm_backward_ms" in case:
            print(f"  cortex_tvm backward alone (the pullback on one forward's kept values): "
                  f"{case['cortex_tvm_backward_ms']:.3f} ms, {case['cortex_tvm_backward_gflops']:.1f} GFLOP/s "
                  f"({TRAIN_FLOPS_FACTOR - 1}x the forward's FLOPs) / sgemm: "
                  f"{case['cortex_tvm_backward_pct_of_sgemm']:.0f} %")
        if "cortex_tvm_pct_of_sgemm" in case:
            of_peak = (f", / this CPU's FMA peak: {case['cortex_tvm_pct_of_peak']:.0f} %"
                       if "cortex_tvm_pct_of_peak" in case else "")
            print(f"  cortex_tvm run-time work ({case['cortex_tvm_runtime_mflop']:.1f} MFLOP, hoisted leaves "
                  f"not counted) / sgemm: {case['cortex_tvm_pct_of_sgemm']:.0f} %{of_peak}")
    print(f"\nmax |err| vs the float64 reference, every batch of every round "
          f"(tolerance {TOLERANCE} * max(1, max|ref|) per batch):")
    _print_verdicts(rows, systems, "max_abs_err", "wrong_batches",
                    lambda system: f", tolerance {tolerance_of(system)} * max(1, max|ref|)")
    if not train:
        return
    print(f"\ngradients (of {', '.join(f'{w} ({MODEL_CLASSES[m]})' for m, w in GRAD_WEIGHT.items())}) vs the "
          f"float64 reference, every batch of every round, max|err| / max|ref| "
          f"(tolerance {GRAD_TOLERANCE}):")
    _print_verdicts(rows, systems, "grad_max_rel_err", "grad_wrong_batches", lambda system: "")


def _print_verdicts(rows, systems, error, wrong, tolerance):
    """One line per system: its worst `error` over the cases that have it, and its batches in
    `wrong` (a list per row); tolerance(system) ends the line."""
    for system in systems:
        checked = [r for r in rows if r["system"] == system and error in r]
        if checked:
            worst = max(r[error] for r in checked)
            bad = sum(len(r[wrong]) for r in checked)
            verdict = f"WRONG ({bad} batch(es))" if bad else "ok"
            print(f"  {system:17s} {worst:.1e}  {verdict}  ({len(checked)} case(s){tolerance(system)})")
