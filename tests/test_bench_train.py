"""`cortex-tvm bench --train`: a training step (forward + backward) per batch, gradients checked.

* end to end on a tiny case (the real CLI in a subprocess): the JSON has the training rows,
  and every system's roots and gradient passed the float64 check;
* the gradient check at the unit level: exact gradients pass, a perturbed batch, a missing,
  misshapen or non-finite gradient is wrong, and `summarize` turns a wrong gradient into a
  failure line naming the system, weight and batch;
* the two references agree: float64 PyTorch autograd (`torch_grads64`) against central
  differences of `models.reference64` (`difference_grads64`, the no-torch fallback), and the
  fallback accepts cortex_tvm's gradients and refuses them 1 % off.
"""
import argparse
import importlib.util
import json
import math
import subprocess
import sys

import numpy as np
import pytest

import cortex_tvm as ct
from cortex_tvm import dot_bf16
from cortex_tvm.bench import add_parser, run
from cortex_tvm.bench.cases import make_model
from cortex_tvm.bench.check import (BF16_GRAD_TOLERANCE, GRAD_TOLERANCE, check_grads, difference_grads64,
                                    grad_wrong_lines, torch_grads64)
from cortex_tvm.bench.common import TRAIN_OPTIMIZER
from cortex_tvm.bench.torch_worker import make_optimizer, train_steps
from cortex_tvm.models import reference64
from cortex_tvm.target import host_features

has_torch = importlib.util.find_spec("torch") is not None


def _grad_ref(batches=3, shape=(10, 4), seed=0):
    ref = np.random.default_rng(seed).standard_normal((batches,) + shape)
    return {"weight": "U", "shape": shape, "index": None, "ref": ref, "method": "test"}


def test_exact_gradients_pass_and_a_wrong_batch_is_caught():
    g = _grad_ref()
    ok = check_grads(g["ref"].astype(np.float32), g)
    assert ok["grad_wrong_batches"] == [] and ok["grad_max_rel_err"] < 1e-6 and len(ok["grad_batch_tol"]) == 3
    wrong = g["ref"].astype(np.float32)
    scale = np.abs(g["ref"][1]).max()
    wrong[1, 2, 3] += 5 * GRAD_TOLERANCE * scale           # a gradient off by 0.5 % of its largest entry
    got = check_grads(wrong, g)
    assert got["grad_wrong_batches"] == [1]
    assert got["grad_batch_rel_err"][1] == pytest.approx(5 * GRAD_TOLERANCE, rel=1e-3)
    line, = grad_wrong_lines("torch-levels", "treelstm H=4 B=2", got, 0)
    assert line.startswith("torch-levels treelstm H=4 B=2 batch 1 (round 1): gradient of U max|err| ")
    transposed = check_grads(np.swapaxes(g["ref"], 1, 2).reshape(g["ref"].shape), g)   # a plausible bug
    assert transposed["grad_wrong_batches"] == [0, 1, 2]


@pytest.mark.parametrize("bad", ["nan", "shape", "missing"])
def test_non_finite_misshapen_or_missing_gradients_are_wrong(bad):
    g = _grad_ref()
    out = g["ref"].copy()
    out[2, 0, 0] = np.nan
    got = check_grads({"shape": out[:, :5], "missing": None}.get(bad, out), g)
    assert got["grad_max_abs_err"] == math.inf
    assert got["grad_wrong_batches"] == ([2] if bad == "nan" else [0, 1, 2])


def test_sampled_reference_compares_only_its_entries():
    g = _grad_ref()
    index = np.array([[0, 0], [3, 2], [9, 3]])
    sampled = {**g, "index": index, "ref": g["ref"][(slice(None),) + tuple(index.T)]}
    out = g["ref"].copy()
    out[:, 5, 1] += 100.0                          # not a sampled entry
    assert check_grads(out, sampled)["grad_wrong_batches"] == []
    out[0, 3, 2] += 1.0                            # a sampled one
    assert check_grads(out, sampled)["grad_wrong_batches"] == [0]


def test_summary_fails_on_a_wrong_gradient():
    """A right root with a wrong gradient is a failure line, and the row is marked."""
    ref_roots = np.tanh(np.random.default_rng(1).standard_normal((3, 2, 4)))
    g = _grad_ref()
    case = {"model": "treelstm", "hidden": 4, "batch": 2, "flops": 1e6, "nodes": 10.0, "train_flops": 3e6}

    def one(system, grads, ms):
        return {"system": system, "round": 0, "model": "treelstm", "hidden": 4, "batch": 2, "ms": ms,
                "per_batch_ms": [ms] * 3, "mode": "train", **run.check_roots(ref_roots, ref_roots),
                **check_grads(grads, g)}
    bad = g["ref"].copy()
    bad[2] *= 1.1
    rows, lines, _ = run.summarize([case], [one("cortex_tvm", g["ref"], 1.0), one("torch-levels", bad, 2.0)],
                                   ["cortex_tvm", "torch-levels"], {})
    by = {r["system"]: r for r in rows}
    assert by["cortex_tvm"]["grad_wrong_batches"] == [] and by["torch-levels"]["grad_wrong_batches"] == [2]
    assert by["torch-levels"]["wrong_batches"] == []           # its roots are right
    assert by["torch-levels"]["ratio"] == pytest.approx(2.0) and by["cortex_tvm"]["gflops"] == pytest.approx(3.0)
    assert len(lines) == 1 and lines[0].startswith("torch-levels treelstm H=4 B=2 batch 2 (round 1): gradient of U")


@pytest.mark.skipif(not has_torch, reason="no torch in this Python")
@pytest.mark.parametrize("name, weight", [("treelstm", "U"), ("treefc", "W")])
def test_torch_reference_against_central_differences(name, weight):
    trees, vocab = ct.data.sst_sample()
    model = make_model(name, 8, len(vocab))
    groups = [trees[0:2], trees[40:42]]
    direction = run.train_direction(2, 8)
    roots, grads = torch_grads64(name, model.weights, groups, direction, weight)
    assert np.abs(roots - np.stack([reference64(model, g) for g in groups])).max() < 1e-12
    index, values = difference_grads64(model, groups, direction, weight, reference64, entries=6)
    assert grads.shape == (2,) + model.weights[weight].shape
    np.testing.assert_allclose(grads[(slice(None),) + tuple(index.T)], values, rtol=1e-6, atol=1e-8)
    assert np.abs(values).max() > 1e-3                    # the sampled entries matter


def _bench_args(argv):
    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers())
    return parser.parse_args(["bench", *argv])


def test_train_refuses_models_without_a_baseline():
    with pytest.raises(SystemExit, match="treelstm, treefc only"):
        run.bench(_bench_args(["--train", "--models", "treegru", "--systems", "cortex_tvm"]))


def test_train_in_bf16_needs_avx512_bf16(monkeypatch):
    monkeypatch.setattr(run, "host_features", lambda: {"avx512f", "avx2"})
    with pytest.raises(SystemExit, match="AVX512_BF16's vdpbf16ps, which this CPU lacks"):
        run.bench(_bench_args(["--train", "--precision", "bf16", "--systems", "cortex_tvm"]))


@pytest.mark.skipif(dot_bf16.FEATURE not in host_features(), reason="a bf16 training step runs vdpbf16ps: this CPU "
                    "has no AVX512_BF16; its refusal was tested")
def test_train_in_bf16_end_to_end(tmp_path):
    """--precision bf16: beside each system its bf16 twin, ours compile(training=True, precision="bf16"),
    PyTorch by height under CPU autocast; their roots and gradients checked at bf16's tolerances, and
    off float64 by more than float32's error (the products did take bfloat16 inputs)."""
    out = tmp_path / "train.json"
    cmd = [sys.executable, "-m", "cortex_tvm.cli", "bench", "--train", "--precision", "bf16", "--models", "treelstm",
           "--hidden", "16", "--embed", "24", "--batch", "2", "--batches", "2", "--repeats", "1", "--rounds", "1",
           "--threads", "2", "--systems", "cortex_tvm", "torch-levels", "--out", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)   # a hang guard only
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = {r["system"]: r for r in json.loads(out.read_text())["rows"]}
    assert set(rows) == {"cortex_tvm", "cortex_tvm-bf16", "torch-levels", "torch-levels-bf16"}
    systems = [s for s in rows if "skipped" not in rows[s]]
    assert {"cortex_tvm", "cortex_tvm-bf16"} <= set(systems)
    for system in systems:
        row = rows[system]
        assert row["mode"] == "train" and row["wrong_batches"] == [] and row["grad_wrong_batches"] == []
        if system.endswith("-bf16"):
            assert 1e-4 < row["grad_max_rel_err"] < BF16_GRAD_TOLERANCE
            assert row["ratio_bf16"] == pytest.approx(row["ms"] / rows["cortex_tvm-bf16"]["ms"])
        else:
            assert row["grad_max_rel_err"] < 1e-4
    assert "vs bf16" in proc.stdout and "0.03 for -bf16 rows" in proc.stdout


def test_summary_reports_the_backward_alone_against_sgemm():
    """Our worker also times the pullback alone; the summary counts it 2x the forward's FLOPs
    (dW = dy x^T and dx = W^T dy) against the same run's sgemm."""
    ref_roots = np.tanh(np.random.default_rng(1).standard_normal((3, 2, 4)))
    g = _grad_ref()
    case = {"model": "treelstm", "hidden": 4, "batch": 2, "flops": 1e6, "nodes": 10.0, "train_flops": 3e6}
    ours = {"system": "cortex_tvm", "round": 0, "model": "treelstm", "hidden": 4, "batch": 2, "ms": 1.0,
            "backward_ms": 0.5, "per_batch_ms": [1.0] * 3, "mode": "train", **run.check_roots(ref_roots, ref_roots),
            **check_grads(g["ref"], g)}
    sgemm = {"system": "sgemm", "round": 0, "gflops": 8.0, "ms": 1.0}
    run.summarize([case], [ours, sgemm], ["cortex_tvm"], {})
    assert case["cortex_tvm_backward_ms"] == 0.5
    assert case["cortex_tvm_backward_gflops"] == pytest.approx(4.0)          # 2e6 FLOP in 0.5 ms
    assert case["cortex_tvm_backward_pct_of_sgemm"] == pytest.approx(50.0)


def test_embed_is_refused_where_it_has_no_meaning():
    with pytest.raises(SystemExit, match="--embed: the models whose word width may differ from H"):
        run.bench(_bench_args(["--embed", "24", "--models", "treefc", "--systems", "cortex_tvm"]))
    with pytest.raises(SystemExit, match="give one of them"):
        run.bench(_bench_args(["--embed", "24", "--features", "32", "--models", "treelstm", "--systems", "cortex_tvm"]))
    with pytest.raises(SystemExit, match="--embed must be >= 1"):
        run.bench(_bench_args(["--embed", "0", "--systems", "cortex_tvm"]))


@pytest.mark.parametrize("optimizer", ["adagrad", "adagrad-sparse-ours"])
def test_train_end_to_end(tmp_path, optimizer):
    """With word vectors wider than the hidden size (--embed, x = 24, H = 16: the SST recipe's
    x = 300, h = 150 in small), ours and PyTorch by height on the same weights; -ours: our side
    steps with cortex_tvm.optim.Adagrad, the same update as the baseline's torch.optim.Adagrad."""
    out = tmp_path / "train.json"
    cmd = [sys.executable, "-m", "cortex_tvm.cli", "bench", "--train", "--models", "treelstm", "--hidden", "16",
           "--embed", "24", "--batch", "2", "--batches", "2", "--repeats", "1", "--rounds", "1", "--threads", "2",
           "--systems", "cortex_tvm", "torch-levels", "--optimizer", optimizer, "--out", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)   # a hang guard only
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = json.loads(out.read_text())
    assert result["meta"]["mode"] == "train" and "forward + backward + Adagrad step" in result["meta"]["metric"]
    ours = optimizer.endswith("-ours")
    assert result["meta"]["optimizer"] == {**TRAIN_OPTIMIZER, "sparse": ours, "ours": ours}
    rows = {r["system"]: r for r in result["rows"]}
    assert set(rows) == {"cortex_tvm", "torch-levels"}
    systems = ["cortex_tvm"] + (["torch-levels"] if "skipped" not in rows["torch-levels"] else [])
    for system in systems:
        row = rows[system]
        assert row["mode"] == "train" and row["grad_weight"] == "U"
        assert math.isfinite(row["ms"]) and row["ms"] > 0 and len(row["per_batch_ms"]) == 2
        assert row["wrong_batches"] == [] and row["max_abs_err"] < 1e-5
        assert row["grad_wrong_batches"] == [] and len(row["grad_batch_abs_err"]) == 2
        assert row["grad_max_rel_err"] < 1e-4
        assert row["trees_per_s"] == pytest.approx(2 / (row["ms"] * 1e-3))      # batch 2
        assert row["optimizer"] == "adagrad" and 0 < row["weight_moved"] < 1   # each timed step stepped
    assert rows["cortex_tvm"]["ratio"] == pytest.approx(1.0)
    if "torch-levels" in systems:
        assert rows["torch-levels"]["ratio"] == pytest.approx(rows["torch-levels"]["ms"] / rows["cortex_tvm"]["ms"])
        # the same optimizer steps on the same gradients: U moved alike on both sides
        assert rows["torch-levels"]["weight_moved"] == pytest.approx(rows["cortex_tvm"]["weight_moved"], rel=1e-4)
    else:
        assert "not installed" in rows["torch-levels"]["skipped"]
    case, = result["cases"]
    assert case["embed"] == 24 and "TreeLSTM H=16 x=24 batch=2" in proc.stdout
    assert case["grad_check"]["weight"] == "U" and len(case["grad_check"]["ref_max_abs"]) == 2
    assert case["cortex_tvm_backward_ms"] > 0 and case["cortex_tvm_backward_pct_of_sgemm"] > 0
    title = ("Adagrad step, sparse embedding gradients (ours: cortex_tvm.optim.Adagrad))" if ours else "Adagrad step)")
    for needle in ("TRAINING STEPS", "ms/step", "trees/s", "dU rel err", "training step (forward + backward + " + title,
                   "cortex_tvm backward alone"):
        assert needle in proc.stdout


def test_fallback_reference_checks_cortex_tvm_gradients():
    """An orchestrator without torch checks against central differences of reference64 at sampled
    entries: cortex_tvm's vjp passes, the same gradient scaled by 1.01 does not."""
    trees, vocab = ct.data.sst_sample()
    model = make_model("treefc", 8, len(vocab))
    _, groups = run.case_groups("treefc", trees, 2, 2)
    direction = run.train_direction(2, 8)
    ref = np.stack([reference64(model, g) for g in groups])
    grad_ref = run.reference_grads(model, "treefc", groups, direction, ref, use_torch=False)
    assert "central differences" in grad_ref["method"] and grad_ref["ref"].shape == (2, 8)
    compiled = model.compile(training=True)
    grads = []
    for group in groups:
        out, vjp = compiled.vjp(group)
        grads.append(vjp(direction)["W"])
    got = check_grads(np.stack(grads), grad_ref)
    assert got["grad_wrong_batches"] == [] and got["grad_max_rel_err"] < 1e-4
    assert check_grads(np.stack(grads) * 1.01, grad_ref)["grad_wrong_batches"] == [0, 1]


@pytest.mark.skipif(not has_torch, reason="no torch in this Python")
def test_the_optimizer_step_is_dgls_adagrad():
    """Both sides' optimizer (`make_optimizer`): the embedding table at table_lr without decay, the
    rest at lr with weight decay; one step from zero state is Adagrad's update, numpy's formula."""
    import torch
    rng = np.random.default_rng(0)
    start = {name: rng.standard_normal(shape).astype(np.float32) for name, shape in
             (("emb", (6, 3)), ("W", (4, 3)), ("b", (4,)))}
    grads = {name: rng.standard_normal(w.shape).astype(np.float32) for name, w in start.items()}
    params = {name: torch.nn.Parameter(torch.from_numpy(w.copy())) for name, w in start.items()}
    optimizer = make_optimizer(params, TRAIN_OPTIMIZER)
    rest, table = optimizer.param_groups
    assert [p is params["emb"] for p in table["params"]] == [True] and table["weight_decay"] == 0
    assert table["lr"] == pytest.approx(0.005) and rest["lr"] == pytest.approx(0.05)
    assert rest["weight_decay"] == pytest.approx(1e-4) and len(rest["params"]) == 2
    for name, p in params.items():
        p.grad = torch.from_numpy(grads[name])
    optimizer.step()
    for name, w in start.items():
        lr, decay = (0.005, 0.0) if name == "emb" else (0.05, 1e-4)
        g = grads[name] + decay * w
        np.testing.assert_allclose(params[name].detach().numpy(), w - lr * g / (np.abs(g) + 1e-10), rtol=1e-5)
    assert make_optimizer(params, None) is None
    with pytest.raises(ValueError, match="only adagrad"):
        make_optimizer(params, {**TRAIN_OPTIMIZER, "kind": "sgd"})


@pytest.mark.skipif(not has_torch, reason="no torch in this Python")
@pytest.mark.parametrize("sparse", [False, True])
def test_our_adagrad_is_the_same_update_as_the_baselines(sparse):
    """--optimizer adagrad(-sparse)-ours: our worker steps with `cortex_tvm.optim.Adagrad`, a baseline
    (which has no `ours` to give) with torch's; two steps on the same gradients agree."""
    import torch

    from cortex_tvm.optim import Adagrad
    rng = np.random.default_rng(1)
    start = {name: rng.standard_normal(shape).astype(np.float32) for name, shape in
             (("emb", (6, 3)), ("W", (40, 3)), ("b", (4,)))}
    spec = {**TRAIN_OPTIMIZER, "sparse": sparse, "ours": True}
    runs = []
    for ours in (None, Adagrad):
        params = {name: torch.nn.Parameter(torch.from_numpy(w.copy())) for name, w in start.items()}
        optimizer = make_optimizer(params, spec, ours)
        assert type(optimizer) is (Adagrad if ours else torch.optim.Adagrad)
        assert type(make_optimizer(params, {**spec, "ours": False}, ours)) is torch.optim.Adagrad
        for step in range(2):
            for name, p in params.items():
                grad = torch.from_numpy(np.random.default_rng(step).standard_normal(p.shape).astype(np.float32))
                p.grad = torch.sparse_coo_tensor(torch.tensor([[1, 4]]), grad[[1, 4]], p.shape) \
                    if sparse and name == "emb" else grad
            optimizer.step()
        runs.append({name: p.detach().numpy().copy() for name, p in params.items()})
    for name in start:
        np.testing.assert_allclose(runs[1][name], runs[0][name], rtol=2e-6, atol=2e-7)
        assert not np.array_equal(runs[1][name], start[name])


@pytest.mark.skipif(not has_torch, reason="no torch in this Python")
def test_train_steps_check_the_gradient_at_the_given_weights():
    """The warm-up's gradients (the ones the orchestrator checks) are the start weights', whatever the
    timed steps do after; the timed steps move the weights; a parameter left without a gradient is
    an error naming it."""
    import torch
    w = {"W": torch.nn.Parameter(torch.ones(2, 2)), "b": torch.nn.Parameter(torch.zeros(2))}
    x = [torch.tensor([1.0, 2.0]), torch.tensor([3.0, -1.0])]

    def step(batch):
        out = w["W"] @ batch + w["b"]
        out.sum().backward()
        return out
    optimizer = make_optimizer(w, TRAIN_OPTIMIZER)
    roots, grads, times, moved = train_steps(step, w, x, "W", 2, optimizer)
    np.testing.assert_allclose(roots, [[3.0, 3.0], [2.0, 2.0]])
    np.testing.assert_allclose(grads, [[[1, 2], [1, 2]], [[3, -1], [3, -1]]])
    assert len(times) == 2 and 0 < moved < 1
    w["c"] = torch.nn.Parameter(torch.zeros(1))
    with pytest.raises(RuntimeError, match=r"no gradient for \['c'\]"):
        train_steps(step, w, x, "W", 1, None)


@pytest.mark.skipif(not has_torch, reason="no torch in this Python")
@pytest.mark.parametrize("system", ["torch-eager", "torch-levels"])
def test_sparse_embedding_baselines_match_the_dense_ones(system):
    """--optimizer adagrad-sparse: the baselines read the embedding through F.embedding(sparse=True);
    the same roots, and a sparse gradient whose dense form is the dense path's, nonzero on the
    batch's words' rows only."""
    import torch
    from cortex_tvm.bench.torch_worker import FlatTree, make_system
    H, x, vocab = 4, 3, 7
    rng = np.random.default_rng(2)
    weights = {"emb": (vocab, x), "W": (3 * H, x), "bW": (3 * H,), "U": (5 * H, 2 * H), "bU": (5 * H,)}
    weights = {k: rng.standard_normal(s).astype(np.float32) for k, s in weights.items()}
    i = np.int64
    trees = [FlatTree(np.array([3, 5, -1], i), np.array([-1, -1, 0], i), np.array([-1, -1, 1], i),
                      np.array([0, 0, 1], i)),
             FlatTree(np.array([5, 1, -1, 6, -1], i), np.array([-1, -1, 0, -1, 2], i),
                      np.array([-1, -1, 1, -1, 3], i), np.array([0, 0, 1, 0, 2], i))]
    got = {}
    for sparse in (False, True):
        w = {k: torch.from_numpy(v.copy()).requires_grad_() for k, v in weights.items()}
        out = make_system(system, "treelstm", H, w, sparse=sparse)(trees)
        out.sum().backward()
        assert w["emb"].grad.is_sparse == sparse
        got[sparse] = out.detach().numpy(), w["emb"].grad.to_dense().numpy(), w["U"].grad.numpy()
    for dense, sparse in zip(got[False], got[True]):
        np.testing.assert_allclose(sparse, dense, rtol=1e-5, atol=1e-6)
    touched = np.flatnonzero(np.abs(got[True][1]).sum(1))
    assert set(touched) == {1, 3, 5, 6}
