"""`cortex-tvm bench --quick`: the harness runs end to end and its numbers are sane (no timing asserts).

Runs the real CLI in a subprocess (the workers are subprocesses anyway).  The
torch systems need a Python with torch: this one, or the one named by
CORTEX_TVM_TORCH_PYTHON; without either they must be reported as not installed.
"""
import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest

from cortex_tvm.bench.common import batch_starts

SYSTEMS = ("cortex_tvm", "numpy", "torch-eager", "torch-levels", "dgl")


def test_batch_starts_spread_and_in_range():
    assert batch_starts(1101, 64, 10)[0] == 0
    for size, count in ((1, 10), (10, 10), (64, 10), (1101, 1), (5, 3)):
        starts = batch_starts(1101, size, count)
        assert len(starts) == count and starts == sorted(starts)
        assert starts[-1] + size <= 1101
    with pytest.raises(ValueError):
        batch_starts(10, 11, 1)


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench") / "quick.json"
    cmd = [sys.executable, "-m", "cortex_tvm.cli", "bench", "--quick", "--threads", "2", "--out", str(out)]
    torch_python = os.environ.get("CORTEX_TVM_TORCH_PYTHON")
    if torch_python:
        cmd += ["--torch-python", torch_python]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)   # a hang guard only: no timing asserts
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout, json.loads(out.read_text())


def test_quick_rows(quick):
    stdout, result = quick
    rows = {r["system"]: r for r in result["rows"]}
    assert set(rows) == set(SYSTEMS)
    for system in ("cortex_tvm", "numpy"):
        row = rows[system]
        assert (row["model"], row["hidden"], row["batch"]) == ("treelstm", 64, 10)
        assert math.isfinite(row["ms"]) and row["ms"] > 0
        assert row["wrong_batches"] == [] and row["max_abs_err"] < 1e-4
        assert len(row["per_batch_ms"]) == 3 and len(row["batch_abs_err"]) == 3
    # a ratio is the system's time over ours, from the same run's rows
    assert rows["cortex_tvm"]["ratio"] == pytest.approx(1.0)
    assert rows["numpy"]["ratio"] == pytest.approx(rows["numpy"]["ms"] / rows["cortex_tvm"]["ms"], rel=1e-6)
    for system in ("torch-eager", "torch-levels", "dgl"):
        row = rows[system]
        if "skipped" in row:
            assert "not installed" in row["skipped"]
            assert f"{system}: skipped, not installed" in stdout
        else:
            assert math.isfinite(row["ms"]) and row["wrong_batches"] == [] and len(row["batch_abs_err"]) == 3
    sgemm = result["sgemm"]
    assert len(sgemm) == 1 and math.isfinite(sgemm[0]["gflops"]) and sgemm[0]["gflops"] > 0
    assert result["meta"]["peak_gflops"] == sgemm[0]["peak_gflops"] > 0
    case = result["cases"][0]
    assert case["cortex_tvm_pct_of_peak"] == pytest.approx(
        case["cortex_tvm_pct_of_sgemm"] * sgemm[0]["gflops"] / sgemm[0]["peak_gflops"], rel=1e-6)
    meta = result["meta"]
    assert meta["threads"] == 2 and meta["tvm"] and len(meta["loadavg_end"]) == 3
    for needle in ("sgemm", "hoisted leaves not counted) / sgemm", "/ this CPU's FMA peak", "fp32 FMA peak", "TreeLSTM H=64 batch=10", "cortex_tvm", "numpy",
                   "max |err| vs the float64 reference"):
        assert needle in stdout


def test_torch_worker_is_standalone():
    """torch_worker.py must not import cortex_tvm (it runs under other Pythons)."""
    from cortex_tvm.bench import torch_worker
    with open(torch_worker.__file__) as f:
        source = f.read()
    imports = [ln for ln in source.splitlines() if ln.lstrip().startswith(("import ", "from "))]
    assert imports and not [ln for ln in imports if "cortex_tvm" in ln]
    probe = subprocess.run([sys.executable, torch_worker.__file__, "--probe"], capture_output=True, text=True,
                           timeout=120)
    assert probe.returncode == 0, probe.stderr
    assert "numpy" in json.loads(probe.stdout.strip().splitlines()[-1])


def test_worker_checks_thread_variables():
    env = dict(os.environ, TVM_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, "-m", "cortex_tvm.bench.worker", "sgemm", "--threads", "2"],
                          env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "thread variables" in proc.stderr
    env.update({v: "2" for v in ("TVM_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")})
    proc = subprocess.run([sys.executable, "-m", "cortex_tvm.bench.worker", "sgemm", "--threads", "2",
                           "--repeats", "2"], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert np.isfinite(json.loads(proc.stdout)["gflops"])


def test_zoo_models_run_in_the_bench(tmp_path):
    """A sequence and a DAG model: cortex_tvm and numpy rows agree; torch rows say there is no baseline."""
    out = tmp_path / "zoo.json"
    cmd = [sys.executable, "-m", "cortex_tvm.cli", "bench", "--models", "seqlstm", "dagrnn", "--hidden", "16",
           "--batch", "4", "--batches", "1", "--repeats", "1", "--rounds", "1", "--threads", "2",
           "--systems", "cortex_tvm", "numpy", "torch-levels", "--out", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = json.loads(out.read_text())["rows"]
    for model in ("seqlstm", "dagrnn"):
        mine = {r["system"]: r for r in rows if r["model"] == model}
        for system in ("cortex_tvm", "numpy"):
            assert math.isfinite(mine[system]["ms"]) and mine[system]["wrong_batches"] == []
            assert mine[system]["max_abs_err"] < 1e-4
        assert "baseline" in mine["torch-levels"]["skipped"] or "not installed" in mine["torch-levels"]["skipped"]


def test_precision_bf16_adds_the_bf16_rows(tmp_path):
    """`--precision bf16`: ours and PyTorch by height (autocast) in bf16 beside the fp32 rows,
    checked at the bf16 tolerance, with the ratio against our bf16 row."""
    out = tmp_path / "bf16.json"
    cmd = [sys.executable, "-m", "cortex_tvm.cli", "bench", "--models", "treelstm", "--hidden", "32",
           "--batch", "4", "--batches", "2", "--repeats", "1", "--rounds", "1", "--threads", "2",
           "--systems", "cortex_tvm", "torch-levels", "--precision", "bf16", "--out", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = {r["system"]: r for r in json.loads(out.read_text())["rows"]}
    assert set(rows) == {"cortex_tvm", "cortex_tvm-bf16", "torch-levels", "torch-levels-bf16"}
    ours = rows["cortex_tvm-bf16"]
    assert math.isfinite(ours["ms"]) and ours["wrong_batches"] == []
    # bf16 weights move the roots (so it is not the fp32 build) by less than the bf16 tolerance
    assert rows["cortex_tvm"]["max_abs_err"] < 1e-5 < ours["max_abs_err"] < 1e-2
    assert ours["ratio_bf16"] == pytest.approx(1.0)
    assert rows["cortex_tvm"]["ratio_bf16"] == pytest.approx(rows["cortex_tvm"]["ms"] / ours["ms"], rel=1e-6)
    torch_bf16 = rows["torch-levels-bf16"]
    if "skipped" in torch_bf16:
        assert "not installed" in torch_bf16["skipped"]
    else:
        assert torch_bf16["wrong_batches"] == [] and 1e-5 < torch_bf16["max_abs_err"] < 1e-2
    assert "vs bf16" in proc.stdout and "tolerance 0.01" in proc.stdout


def test_fma_peak_kernel_computes_its_fmas_in_registers():
    """The peak's kernel does the FMAs it counts: acc <- acc * 0.999 + 0.001 from 0.5, `steps`
    times on every lane of every chain and core, with no accumulator in heap memory."""
    import tvm

    import cortex_tvm as ct
    from cortex_tvm.bench.peak import fma_kernel, fma_peak
    from cortex_tvm.target import cpu_info
    info = cpu_info("llvm")
    func = fma_kernel(2, 6, info.lanes)
    executable = tvm.compile(tvm.IRModule({"peak": func}), target=ct.make_target("llvm"),
                             tir_pipeline=ct.TIR_PIPELINE)
    assert "TVMBackendAllocWorkspace" not in executable.mod.inspect_source("ll")
    out = tvm.runtime.tensor(np.zeros(2 * 6 * info.lanes, np.float32))
    executable["peak"](out, 500)
    want = 0.5                     # float64: a fused multiply-add rounds once, float32 numpy twice
    for _ in range(500):
        want = want * float(np.float32(0.999)) + float(np.float32(0.001))
    np.testing.assert_allclose(out.numpy(), want, rtol=2e-6)
    got = fma_peak(repeats=1)
    assert got["lanes"] == info.lanes and got["chains"] == info.registers - 8 and math.isfinite(got["gflops"])
