"""`python -m cortex_tvm.bench.knob_ab`: one knob on and off, checked and timed (no timing asserts)."""
import argparse

import pytest

from cortex_tvm.bench import knob_ab


def test_prints_both_builds_of_one_case(capsys):
    assert knob_ab.main(["--models", "treefc", "--hidden", "16", "--batch", "3", "--batches", "2",
                         "--repeats", "1", "--rounds", "1", "--knob", "persistent_threads=true"]) == 0
    (line,) = capsys.readouterr().out.splitlines()
    assert line.startswith("treefc H=16 batch=3: default ") and ", persistent_threads=true " in line
    assert "(default / knob: " in line


def test_bad_knobs_are_named():
    with pytest.raises(argparse.ArgumentTypeError, match="name=value"):
        knob_ab.parse_knob("persistent_threads")
    with pytest.raises(argparse.ArgumentTypeError, match="'yes' is not a JSON value"):
        knob_ab.parse_knob("persistent_threads=yes")
    assert knob_ab.parse_knob("node_tile=2") == ("node_tile", 2)
    with pytest.raises(SystemExit, match="no knob 'colour'"):
        knob_ab.main(["--models", "treefc", "--hidden", "16", "--knob", "colour=1"])
