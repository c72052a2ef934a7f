"""bench/limit: the per-level limit's arithmetic, and the command on a tiny model."""
import json

import numpy as np
import pytest

import cortex_tvm as ct
from cortex_tvm.bench import limit


def test_a_level_is_bound_by_its_weight_bytes_or_its_flops_whichever_is_larger():
    machine = limit.Machine(bandwidth=100e9, peak=200e9, cores=2)
    # 4 MB over 2 cores at 100 GB/s: 20 us; one node of 2 MFLOP at 200 GFLOP/s: 10 us
    assert limit.level_limit(1, 2e6, 4e6, machine, fork_join=0.0) == pytest.approx(20e-6)
    # five nodes: 50 us of FMAs, the bytes no longer count
    assert limit.level_limit(5, 2e6, 4e6, machine, fork_join=0.0) == pytest.approx(50e-6)
    assert limit.level_limit(5, 2e6, 4e6, machine) == pytest.approx(51e-6)     # plus a fork and join
    assert limit.batch_limit([1, 5, 1], 2e6, 4e6, machine, fork_join=0.0) == pytest.approx(90e-6)


def test_node_flops_and_level_sizes_come_from_the_model_and_its_layout():
    model = ct.models.TreeLSTM(hidden_size=8, vocab_size=20)
    assert limit.node_flops(model) == 2 * 5 * 8 * 2 * 8         # U (5H, 2H) times [h_l; h_r]
    fc = ct.models.TreeFC(hidden_size=8, vocab_size=20)
    assert limit.node_flops(fc) >= 2 * 8 * 8
    leaf = ct.data.Node(word=1)
    chain = leaf
    for _ in range(3):                       # three internal levels of one node, four leaves
        chain = ct.data.Node(children=[chain, ct.data.Node(word=2)])
    balanced = ct.data.Node(children=[ct.data.Node(children=[ct.data.Node(word=1), ct.data.Node(word=2)]),
                                      ct.data.Node(children=[ct.data.Node(word=3), ct.data.Node(word=4)])])
    sizes = limit.internal_level_sizes(model.linearize([chain, balanced]))
    assert sizes.tolist() == [3, 2, 1]       # both trees' first internal levels side by side


def test_the_command_prints_and_writes_a_row_per_precision(tmp_path, capsys):
    out = tmp_path / "limit.jsonl"
    assert limit.main(["--hidden", "16", "--batch", "2", "--batches", "2", "--rounds", "1",
                       "--out", str(out)]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["precision"] for r in rows] == ["fp32"]
    row = rows[0]
    assert row["model"] == "treelstm" and row["hidden"] == 16 and row["batch"] == 2
    assert row["limit_ms"] > 0 and row["kernel_ms"] > 0 and row["call_ms"] > 0
    assert row["kernel_vs_limit"] == pytest.approx(row["kernel_ms"] / row["limit_ms"])
    machine = limit.Machine(**row["machine"])
    assert machine.cores >= 1 and machine.bandwidth > 0 and machine.peak > 0
    text = capsys.readouterr().out
    assert "treelstm H=16 batch 2" in text and "fp32" in text and np.isfinite(row["levels"])
