"""The JSON-lines log: append, resume, corrupt lines, best and nearest."""
import json
import math

import pytest

from cortex_tvm.tune import Database, TuningPoint, TuningRecord, Workload


def wl(hidden=64, batch=10, model="TreeFC", target="llvm"):
    return Workload(model, hidden, hidden, 100, target, batch)


def rec(workload, tile, seconds, error=None):
    return TuningRecord(workload, TuningPoint.of(column_tile=tile), () if error else (seconds, seconds),
                        error, 1.0, {"cortex_tvm": "0.1.0", "tvm": "0.27"})


def test_append_and_reload(tmp_path):
    path = tmp_path / "log.jsonl"
    db = Database(path)
    db.commit(rec(wl(), 32, 2e-3))
    db.commit(rec(wl(), 16, 0, error="build failed"))
    lines = path.read_text().splitlines()
    assert len(lines) == 2
    first = json.loads(lines[0])
    assert first["workload"]["model"] == "TreeFC" and first["knobs"] == {"column_tile": 32}
    assert first["mean"] == pytest.approx(2e-3) and first["error"] is None and first["cortex_tvm"] == "0.1.0"
    assert json.loads(lines[1])["mean"] is None
    again = Database(path)
    assert again.records == db.records
    assert math.isinf(again.records[1].mean)
    Database(path).commit(rec(wl(), 64, 1e-3))      # append-only: the old lines stay
    assert path.read_text().splitlines()[:2] == lines


def test_resume_sees_measured_points(tmp_path):
    path = tmp_path / "log.jsonl"
    Database(path).commit(rec(wl(), 32, 2e-3))
    Database(path).commit(rec(wl(hidden=128), 16, 2e-3))
    measured = Database(path).measured(wl())
    assert set(measured) == {TuningPoint.of(column_tile=32)}


def test_corrupt_line_warns_with_its_number(tmp_path):
    path = tmp_path / "log.jsonl"
    db = Database(path)
    db.commit(rec(wl(), 32, 2e-3))
    with open(path, "a") as f:
        f.write('{"workload": {"model": "TreeFC"\n')        # an interrupted write
    with pytest.warns(UserWarning, match="line 2"):
        db = Database(path)
    db.commit(rec(wl(), 16, 1e-3))
    with pytest.warns(UserWarning, match="line 2"):
        records = Database(path).records
    assert [r.point.as_dict()["column_tile"] for r in records] == [32, 16]


def test_best_skips_failures_and_other_workloads():
    db = Database()
    for r in (rec(wl(), 32, 2e-3), rec(wl(), 16, 0, error="x"), rec(wl(), 64, 1e-3), rec(wl(hidden=128), 8, 1e-6)):
        db.commit(r)
    assert db.best(wl()).point == TuningPoint.of(column_tile=64)
    assert db.best(wl(hidden=32)) is None


def test_nearest_says_which():
    db = Database()
    for r in (rec(wl(64), 32, 2e-3), rec(wl(256), 64, 5e-3), rec(wl(128, batch=64), 16, 1e-3),
              rec(wl(256, model="TreeLSTM"), 80, 1e-3), rec(wl(100, target="cuda"), 8, 1e-4)):
        db.commit(r)
    record, how = db.nearest(wl(64))
    assert how == "exact" and record.point.as_dict()["column_tile"] == 32
    record, how = db.nearest(wl(200))              # closest hidden size (log scale), same model/target
    assert how == "nearest" and record.workload.hidden == 256 and record.workload.model == "TreeFC"
    record, how = db.nearest(wl(128, batch=10))    # hidden size first, then batch
    assert how == "nearest" and record.workload == wl(128, batch=64)
    assert db.nearest(wl(64, model="TreeRNN")) == (None, "none")
    record, how = db.nearest(wl(128, batch=None))  # any batch size
    assert how == "exact" and record.workload.batch_size == 64
