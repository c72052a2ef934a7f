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


def test_the_line_names_the_size_that_ran(capsys):
    """MV-RNN runs at most at H=64 in the bench: asked for 150, the line must say 64."""
    assert knob_ab.main(["--models", "mvrnn", "--hidden", "150", "--batch", "2", "--batches", "1",
                         "--repeats", "1", "--rounds", "1", "--knob", "persistent_threads=true"]) == 0
    assert capsys.readouterr().out.startswith("mvrnn H=64 batch=2: default ")


def test_several_knobs_go_into_one_build(capsys):
    assert knob_ab.main(["--models", "treefc", "--hidden", "16", "--batch", "3", "--batches", "1",
                         "--repeats", "1", "--rounds", "1", "--knob", "node_tile=2", "k_unroll=4"]) == 0
    (line,) = capsys.readouterr().out.splitlines()
    assert ", node_tile=2,k_unroll=4 " in line
    _, _, compiled = knob_ab.builds("treefc", 16, [("node_tile", 2), ("k_unroll", 4)], "llvm")
    tiles = [s["args"] for s in compiled["node_tile=2,k_unroll=4"].trace if s["primitive"] == "tile_gemm"]
    # the whole tiles take 2 nodes; the tail of a level of odd size, 1 (level_tails)
    assert tiles and all(t["node_tile"] == (1 if "_tail1" in t["block"] else 2) and t["k_unroll"] == 4
                         for t in tiles)
