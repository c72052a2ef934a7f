"""The bench's results: each system's best round per case with its errors over every round,
the tables printed at the end, and what the JSON keeps of a case."""
from __future__ import annotations

import math

import numpy as np

from . import TORCH_SYSTEMS
from .cases import MODEL_CLASSES, TORCH_MODELS, hidden_for
from .check import (BF16_GRAD_TOLERANCE, GRAD_TOLERANCE, TOLERANCE, grad_tolerance_of, grad_wrong_lines,
                    tolerance_of, wrong_lines)
from .common import GRAD_WEIGHT, TRAIN_FLOPS_FACTOR, train_optimizer, train_step_parts

def _fmt_ms(ms):
    return f"{ms:9.3f}" if ms < 100 else f"{ms:9.1f}"


def case_record(case):
    """A case for the JSON: no paths or arrays; with --train, how its gradients were checked."""
    out = {k: v for k, v in case.items() if k not in ("path", "ref", "grad_ref")}
    if "grad_ref" in case:
        g = case["grad_ref"]
        out["grad_check"] = {"weight": g["weight"], "method": g["method"], "tolerance": GRAD_TOLERANCE,
                             "entries": None if g["index"] is None else np.asarray(g["index"]).tolist(),
                             "ref_max_abs": [float(np.max(np.abs(r))) for r in g["ref"]]}
    return out


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
                       mean_nodes=case["nodes"], mflop=flops / 1e6, gflops=flops / (b["ms"] * 1e-3) / 1e9,
                       trees_per_s=key[2] / (b["ms"] * 1e-3))
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
        spec = train_optimizer(args)
        which = ("Adagrad's step, ours cortex_tvm.optim.Adagrad, the baselines torch.optim.Adagrad"
                 if spec and spec["ours"] else "torch.optim.Adagrad's step on every side")
        step = "" if spec is None else (
            f", then {which} (lr {spec['lr']}, weight decay "
            f"{spec['weight_decay']}; the embedding at lr {spec['table_lr']}, no decay: DGL's TreeLSTM recipe"
            + ("; the embedding's gradient sparse on every side" if spec["sparse"] else "") + ")")
        print(f"TRAINING STEPS: ms = one training step per batch (forward, loss = sum(roots * R), backward to the "
              f"gradients of every weight{step}); GFLOP/s count {TRAIN_FLOPS_FACTOR}x the forward's useful FLOPs")
    print(f"metric: mean over {args.batches} batches of the best of {args.repeats} runs, "
          f"best of {args.rounds} round(s); ratio = system / cortex_tvm (x slower than ours)"
          + ("; vs bf16 = system / cortex_tvm-bf16" if "cortex_tvm-bf16" in systems else ""))
    for case in cases:
        key = (case["model"], case["hidden"], case["batch"])
        what = (f"training step ({train_step_parts(args)}), {case['flops'] / 1e6:.1f} MFLOP forward per batch"
                if train else f"{case['flops'] / 1e6:.1f} MFLOP per batch")
        width = f" x={case['embed']}" if case.get("embed") not in (None, hidden_for(key[0], key[1])) else ""
        print(f"\n{MODEL_CLASSES[key[0]]} H={hidden_for(key[0], key[1])}{width} batch={key[2]}: "
              f"{case['nodes']:.0f} nodes, " + what)
        bf16 = "cortex_tvm-bf16" in systems
        print(f"  {'system':17s} {'ms/step' if train else 'ms':>9s} {'ratio':>7s}"
              + (f" {'vs bf16':>7s}" if bf16 else "") + f" {'GFLOP/s':>8s}"
              + (f" {'trees/s':>8s}" if train else "") + f" {'max|err|':>10s}"
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
            trees = f"{row['trees_per_s']:8.0f} " if train else ""
            print(f"  {row['system']:17s} {_fmt_ms(row['ms'])} {ratio} {row['gflops']:8.1f} {trees}"
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
          f"(tolerance {GRAD_TOLERANCE}, {BF16_GRAD_TOLERANCE} for -bf16 rows):")
    _print_verdicts(rows, systems, "grad_max_rel_err", "grad_wrong_batches",
                    lambda system: f", tolerance {grad_tolerance_of(system)}")


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
