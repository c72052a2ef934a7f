"""Tuning through TVM's RPC: a tracker and a server on loopback, trials measured on the server."""
import json
import socket

import numpy as np
import pytest

from cortex_tvm import tune

KNOBS = {"node_tile": [1, 2], "k_unroll": [8], "unroll_depth": [1], "parallel_columns": [True],
         "hoist": [True], "max_column_vectors": [2]}


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def rpc_cluster():
    from tvm import rpc
    from tvm.rpc.tracker import Tracker
    tracker = Tracker("127.0.0.1", port=_free_port(), port_end=65000, silent=True)
    server = rpc.Server("127.0.0.1", port=_free_port(), port_end=65000, key="cortex-test",
                        tracker_addr=("127.0.0.1", tracker.port), silent=True)
    yield "127.0.0.1", tracker.port, "cortex-test"
    server.terminate()
    tracker.terminate()


def test_tune_through_rpc_tracker_and_server(rpc_cluster, fc32, trees, tmp_path):
    log = tmp_path / "remote.jsonl"
    best = tune.tune(fc32, trials=2, log=log, trees=trees, repeats=1, max_batches=2, knobs=KNOBS,
                     progress=None, rpc=rpc_cluster, confirm_rounds=0)
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(records) == 2 and all(r["error"] is None for r in records), records
    assert all(np.isfinite(r["mean"]) and r["mean"] > 0 for r in records)
    assert best is not None
    compiled = fc32.compile(tuning_log=str(log))
    np.testing.assert_allclose(compiled(trees[:10]), fc32.reference(trees[:10]), atol=1e-4)


def test_unreachable_tracker_is_a_failed_trial_not_a_crash(fc32, trees):
    from cortex_tvm.tune import Space
    from cortex_tvm.tune.measure import tuning_batches
    measurer = tune.RPCMeasurer(fc32, tuning_batches(fc32, trees, 10, 1), repeats=1,
                                tracker_port=_free_port(), key="nobody", session_timeout=5)
    result = measurer.measure(Space(fc32), Space(fc32).default())
    assert result.mean == float("inf") and result.error
