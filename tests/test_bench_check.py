"""The bench's correctness check: every batch of every system against the float64 reference.

A deliberately wrong result is caught at the unit level (`check_roots` on a perturbed batch),
in the summary (the row is marked, the line names model, size, system and batch), and end to
end (`cortex-tvm bench` exits 1 when a batch's reference disagrees with what numpy computed).
The torch workers' roots of every batch are checked when a Python with torch is available
(this one, or CORTEX_TVM_TORCH_PYTHON); without one that test skips.
"""
import argparse
import importlib.util
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import cortex_tvm as ct
from cortex_tvm.bench import add_parser, case_data, run
from cortex_tvm.bench.cases import make_model
from cortex_tvm.bench.check import TOLERANCE, batch_tolerance, check_roots, wrong_lines
from cortex_tvm.bench.common import thread_env


def _ref(batches=4, size=3, hidden=5, seed=0):
    return np.tanh(np.random.default_rng(seed).standard_normal((batches, size, hidden)))


def test_exact_float32_roots_pass():
    ref = _ref()
    got = check_roots(ref.astype(np.float32), ref)
    assert got["wrong_batches"] == [] and len(got["batch_abs_err"]) == 4
    assert 0 < got["max_abs_err"] < 1e-7 and got["batch_tol"] == [TOLERANCE] * 4


def test_one_perturbed_batch_is_caught():
    ref = _ref()
    out = ref.astype(np.float32)
    out[2, 1, 3] += 5 * TOLERANCE
    got = check_roots(out, ref)
    assert got["wrong_batches"] == [2]
    assert got["batch_abs_err"][2] == pytest.approx(5 * TOLERANCE, rel=1e-3)
    assert max(got["batch_abs_err"][k] for k in (0, 1, 3)) < 1e-7
    line, = wrong_lines("numpy", "treelstm H=5 B=3", got, 0)
    assert line.startswith("numpy treelstm H=5 B=3 batch 2 (round 1): max|err| 0.005 > tolerance 0.001")


@pytest.mark.parametrize("bad", ["nan", "inf", "shape", "missing"])
def test_non_finite_misshapen_or_missing_roots_are_wrong(bad):
    ref = _ref()
    out = ref.astype(np.float32)
    if bad in ("nan", "inf"):
        out[1, 0, 0] = float(bad)
    got = check_roots({"shape": out[:, :2], "missing": None}.get(bad, out), ref)
    assert got["max_abs_err"] == float("inf")
    assert got["wrong_batches"] == ([1] if bad in ("nan", "inf") else [0, 1, 2, 3])


def test_tolerance_scales_with_large_roots():
    ref = _ref() * 4                      # e.g. a one-leaf TreeFC tree: the root is an embedding
    assert batch_tolerance(ref[0]) == pytest.approx(TOLERANCE * np.abs(ref[0]).max())
    assert batch_tolerance(ref[0] / 100) == TOLERANCE
    out = ref + 2 * TOLERANCE             # within 1e-3 relative of |ref| ~ 4
    assert check_roots(out, ref)["wrong_batches"] == []


def _run(system, rnd, ref, out, ms=1.0):
    return {"system": system, "round": rnd, "model": "treefc", "hidden": 5, "batch": 3, "ms": ms,
            "per_batch_ms": [ms] * len(ref), **check_roots(out, ref)}


def test_summary_marks_the_wrong_system_and_batch():
    ref = _ref()
    wrong = ref.copy()
    wrong[3] += 0.1
    case = {"model": "treefc", "hidden": 5, "batch": 3, "flops": 1e6, "nodes": 10.0}
    runs = [_run("cortex_tvm", 0, ref, ref), _run("numpy", 0, ref, ref, 2.0),
            _run("numpy", 1, ref, wrong, 1.5)]          # right in round 1, wrong in round 2
    rows, lines, _ = run.summarize([case], runs, ["cortex_tvm", "numpy"], {})
    by = {r["system"]: r for r in rows}
    assert by["cortex_tvm"]["wrong_batches"] == [] and by["cortex_tvm"]["max_abs_err"] == 0
    assert by["numpy"]["wrong_batches"] == [3] and by["numpy"]["max_abs_err"] == pytest.approx(0.1)
    assert by["numpy"]["best_round"] == 1 and by["numpy"]["batch_abs_err"][3] == pytest.approx(0.1)
    assert lines == ["numpy treefc H=5 B=3 batch 3 (round 2): max|err| 0.1 > tolerance 0.001"]


def _bench_args(argv):
    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers())
    return parser.parse_args(["bench", *argv])


def test_bench_exits_nonzero_when_a_system_is_wrong(tmp_path, monkeypatch, capsys):
    """The reference of batch 1 is moved: numpy's (right) roots must now fail that batch only."""
    calls = []

    def moved(model, structures):           # write_case asks for batch 0, 1, 2 in turn
        calls.append(len(structures))
        out = ct.models.reference64(model, structures)
        return out + 0.5 if len(calls) == 2 else out
    monkeypatch.setattr(case_data, "reference64", moved)
    out = tmp_path / "wrong.json"
    args = _bench_args(["--models", "treefc", "--hidden", "8", "--batch", "2", "--batches", "3",
                        "--repeats", "1", "--rounds", "1", "--threads", "1", "--systems", "numpy",
                        "--out", str(out)])
    assert run.bench(args) == 1
    captured = capsys.readouterr()
    assert "numpy treefc H=8 B=2 batch 1 (round 1): max|err| 0.5 > tolerance " in captured.err
    assert "<-- WRONG in batches [1]" in captured.out and "WRONG (1 batch(es))" in captured.out
    row, = json.loads(out.read_text())["rows"]
    assert row["wrong_batches"] == [1] and row["batch_abs_err"][1] == pytest.approx(0.5)


def _torch_python():
    explicit = os.environ.get("CORTEX_TVM_TORCH_PYTHON")
    if explicit:
        return explicit
    if importlib.util.find_spec("torch") is not None:
        return sys.executable
    pytest.skip("no torch here and no CORTEX_TVM_TORCH_PYTHON")


@pytest.mark.parametrize("name", ["treelstm", "treefc"])
def test_torch_workers_roots_of_every_batch_match_the_reference(name, tmp_path):
    python = _torch_python()
    found, probe, reason = run.find_torch_python(python, 1)
    if found is None:
        pytest.skip(reason)
    trees, vocab = ct.data.sst_sample()
    path = str(tmp_path / "case.npz")
    _, _, ref = run.write_case(path, make_model(name, 16, len(vocab)), name, trees, 3, 4)
    for system in ("torch-eager", "torch-levels", "dgl"):
        if system == "dgl" and not probe.get("dgl"):
            continue
        roots = str(tmp_path / f"{system}.npy")
        proc = subprocess.run([python, run.TORCH_WORKER, system, path, "--roots", roots, "--repeats", "1",
                               "--threads", "1"], env=thread_env(1), capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
        got = check_roots(np.load(roots), ref)
        assert got["wrong_batches"] == [] and len(got["batch_abs_err"]) == 4, (system, got)
        assert got["max_abs_err"] < 1e-5, (system, got)


def test_bf16_systems_get_the_bf16_tolerance():
    from cortex_tvm.bench.check import BF16_TOLERANCE, tolerance_of
    assert tolerance_of("cortex_tvm") == tolerance_of("torch-levels") == TOLERANCE
    assert tolerance_of("cortex_tvm-bf16") == tolerance_of("torch-levels-bf16") == BF16_TOLERANCE == 1e-2
    ref = _ref()
    out = ref.astype(np.float32)
    out[1, 0, 0] += 5 * TOLERANCE                   # a bf16-sized error: wrong at fp32, fine at bf16
    assert check_roots(out, ref)["wrong_batches"] == [1]
    assert check_roots(out, ref, BF16_TOLERANCE)["wrong_batches"] == []
    out[3, 0, 0] += 5 * BF16_TOLERANCE              # a wrong result is wrong at either
    assert check_roots(out, ref, BF16_TOLERANCE)["wrong_batches"] == [3]
