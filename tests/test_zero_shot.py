"""`python -m cortex_tvm.bench.zero_shot`: tunes from empty logs, the zero-shot pick and the
default, all timed in one process (no timing asserts)."""
import argparse
import json

import pytest

from cortex_tvm.bench import zero_shot
from cortex_tvm.tune.database import Database


def test_one_case_tunes_each_budget_and_times_every_point(tmp_path, capsys):
    out = tmp_path / "zs"
    assert zero_shot.main(["--cases", "treefc:16", "--trials", "3", "5", "--rounds", "1", "--repeats", "1",
                           "--out", str(out)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("zero_shot: ") and "TVM_NUM_THREADS=" in lines[0]
    assert lines[1].startswith("treefc H=16 ") and "(over the best tune: default " in lines[1]
    (row,) = [json.loads(s) for s in (out / "zero_shot.jsonl").read_text().splitlines()]
    assert set(row) >= {"case", "threads", "default", "pick", "tuned 3", "tuned 5"}
    assert all(row[k]["seconds"] > 0 for k in ("default", "pick", "tuned 3", "tuned 5"))
    # each budget tuned from an empty log of its own: exactly its trials, plus the re-timings
    for trials in (3, 5):
        (log,) = out.glob(f"treefc-16-*-10-{trials}.jsonl")
        db = Database(str(log))
        assert len({r.point for r in db.records}) == trials
        assert row[f"tuned {trials}"]["knobs"] == db.best(db.records[0].workload).point.to_json()


def test_a_bad_case_is_named():
    with pytest.raises(argparse.ArgumentTypeError, match="model:hidden"):
        zero_shot.parse_case("treelstm")
    with pytest.raises(argparse.ArgumentTypeError, match="'oak:12'"):
        zero_shot.parse_case("oak:12")
    assert zero_shot.parse_case("treegru:320") == ("treegru", 320)
