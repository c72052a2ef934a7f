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


def test_a_point_ranks_by_the_median_of_its_warm_measurements():
    """The default is measured first, cold: its slow first trial must not rank it behind a
    point that is slower when both are warm (the H=512 case of issue 18: 9.46 ms cold, then
    7.84-7.96 ms, lost to a point re-timed at 8.09 ms under the mean)."""
    db = Database()
    default, other = wl(), wl()
    cold = TuningRecord(default, TuningPoint.of(column_tile=32), (9.46e-3,), None, 1.0, warm=False)
    db.commit(cold)
    for seconds in (7.84e-3, 7.96e-3):
        db.commit(rec(default, 32, seconds))
    for seconds in (8.09e-3, 8.10e-3, 8.12e-3):
        db.commit(rec(other, 16, seconds))
    assert db.best(wl()).point == TuningPoint.of(column_tile=32)
    assert db.standing(wl(), TuningPoint.of(column_tile=32)) == pytest.approx(7.90e-3)
    # the mean over all three would have put it behind: (9.46 + 7.84 + 7.96) / 3 = 8.42 ms
    assert sum(r.mean for r in db.for_workload(wl())[:3]) / 3 > 8.09e-3
    # an outlier among warm measurements moves a median, unlike a mean, by one rank only
    db.commit(rec(other, 16, 50e-3))
    assert db.standing(wl(), TuningPoint.of(column_tile=16)) == pytest.approx(8.11e-3)


def test_a_cold_measurement_counts_while_it_is_the_only_one(tmp_path):
    path = tmp_path / "log.jsonl"
    db = Database(path)
    db.commit(TuningRecord(wl(), TuningPoint.of(column_tile=32), (3e-3,), None, 1.0, warm=False))
    db.commit(rec(wl(), 16, 4e-3))
    again = Database(path)                         # the flag survives the log
    assert [r.warm for r in again.records] == [False, True]
    assert again.best(wl()).point == TuningPoint.of(column_tile=32)
    assert math.isinf(again.standing(wl(), TuningPoint.of(column_tile=8)))


def test_the_tune_summary_puts_the_default_beside_the_best():
    from cortex_tvm.tune.search import summary
    db = Database()
    default, other = TuningPoint.of(column_tile=32), TuningPoint.of(column_tile=16)
    for seconds in (2e-3, 2.2e-3):
        db.commit(rec(wl(), 32, seconds))
    db.commit(rec(wl(), 16, 1.05e-3))
    line = summary(db, wl(), db.best(wl()), default)
    assert line == f"tune: best 1.050 ms  [{other}]; default 2.100 ms, 2.00x the best"
    for _ in range(3):                             # median of 2.0, 2.2, 1.0, 1.0, 1.0 ms
        db.commit(rec(wl(), 32, 1e-3))
    assert summary(db, wl(), db.best(wl()), default).startswith("tune: the default is the fastest point measured: 1.000 ms")


def retimed(workload, tile, seconds, began, at):
    return TuningRecord(workload, TuningPoint.of(column_tile=tile), (seconds,), None, at, in_turn=began)


def test_an_in_turn_retiming_ranks_its_points_by_its_times_alone(tmp_path):
    """Trials minutes apart on a drifting VM: 16 was lucky (1.0 ms once), 32 unlucky.  Timed in
    turn, 32 is faster, and that decides, whatever the medians of all their records say
    (the tuner's report was off by up to 26% on Zen 5 when it ranked by those medians)."""
    path = tmp_path / "log.jsonl"
    db = Database(path)
    t16, t32, t64 = (TuningPoint.of(column_tile=t) for t in (16, 32, 64))
    db.commit(TuningRecord(wl(), t16, (1.0e-3,), None, 10.0))
    db.commit(TuningRecord(wl(), t32, (1.6e-3,), None, 11.0))
    db.commit(TuningRecord(wl(), t64, (1.3e-3,), None, 12.0))
    assert db.best(wl()).point == t16
    assert [p for p, _ in db.ranking(wl())] == [t16, t64, t32]
    db.commit(retimed(wl(), 16, 1.25e-3, began=20.0, at=21.0))
    db.commit(retimed(wl(), 32, 1.20e-3, began=20.0, at=22.0))
    # 32's median over both records (1.4 ms) is still behind 16's (1.125 ms): the in-turn figures rank
    again = Database(path)                          # the mark survives the log
    assert [r.in_turn for r in again.records] == [None, None, None, 20.0, 20.0]
    assert again.best(wl()).point == t32
    assert again.ranking(wl()) == [(t32, pytest.approx(1.20e-3)), (t16, pytest.approx(1.25e-3)),
                                   (t64, pytest.approx(1.3e-3))]      # the rest follow, by median
    assert set(again.in_turn(wl())) == {t16, t32}
    assert again.standing(wl(), t32) == pytest.approx(1.20e-3)
    # the search picks its next leaders by median, ignoring the last re-timing's order
    assert [r.point for r in again.top_k(wl(), 2, by_median=True)] == [t16, t64]   # 1.125, 1.3 ms
    # a trial logged after the re-timing makes it stale: every point ranks by its median again
    again.commit(TuningRecord(wl(), TuningPoint.of(column_tile=8), (1.5e-3,), None, 30.0))
    assert again.in_turn(wl()) == {} and again.best(wl()).point == t16


def test_only_the_latest_retiming_counts_and_a_failure_there_does_not_rank():
    db = Database()
    t16, t32 = TuningPoint.of(column_tile=16), TuningPoint.of(column_tile=32)
    db.commit(retimed(wl(), 16, 1.0e-3, began=5.0, at=6.0))
    db.commit(retimed(wl(), 32, 2.0e-3, began=5.0, at=6.0))
    db.commit(retimed(wl(), 16, 3.0e-3, began=9.0, at=10.0))
    db.commit(TuningRecord(wl(), t32, (), "wrong numbers", 10.0, in_turn=9.0))
    assert set(db.in_turn(wl())) == {t16}
    assert db.best(wl()).point == t16                  # 32 ranks after, by the median of its successes
    assert db.ranking(wl()) == [(t16, pytest.approx(3.0e-3)), (t32, pytest.approx(2.0e-3))]
    assert db.in_turn(wl(hidden=128)) == {}


def test_the_summary_says_when_both_were_timed_in_turn():
    from cortex_tvm.tune.search import summary
    db = Database()
    default, other = TuningPoint.of(column_tile=32), TuningPoint.of(column_tile=16)
    db.commit(TuningRecord(wl(), default, (1e-3,), None, 1.0))
    db.commit(TuningRecord(wl(), other, (2e-3,), None, 2.0))
    db.commit(retimed(wl(), 32, 1.5e-3, began=3.0, at=4.0))
    db.commit(retimed(wl(), 16, 1.2e-3, began=3.0, at=4.0))
    assert summary(db, wl(), db.best(wl()), default) == (
        f"tune: best 1.200 ms  [{other}]; default 1.500 ms, 1.25x the best (both timed in turn)")
