"""A tiny tune writes a log that model.compile(tuning_log=...) uses; CLI wiring."""
import json
import re
import warnings

import numpy as np
import pytest

import cortex_tvm as ct
from cortex_tvm import tune
from cortex_tvm.tune import Space, TuningPoint

KNOBS = {"node_tile": [1, 2], "k_unroll": [4, 8], "unroll_depth": [1], "parallel_columns": [True],
         "hoist": [True], "max_column_vectors": [2]}


def test_tiny_tune_then_compile_from_log(fc32, trees, tmp_path, capsys):
    log = tmp_path / "tuning.jsonl"
    best = tune.tune(fc32, trials=3, log=log, trees=trees, batch_size=10, repeats=1, max_batches=2, knobs=KNOBS,
                     confirm_rounds=0)
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(lines) == 3 and all(r["error"] is None for r in lines)
    assert all(r["recipe"].startswith("derived@") and r["tvm"] and r["cortex_tvm"] for r in lines)
    assert "trial 3/3" in capsys.readouterr().err
    assert isinstance(best, TuningPoint) and best in {TuningPoint.from_json(r["knobs"]) for r in lines}

    before = ct.compile_count()
    with warnings.catch_warnings():
        warnings.simplefilter("error")            # an exact record: no warning
        compiled = fc32.compile(tuning_log=str(log))
    assert ct.compile_count() - before <= 1
    batch = trees[:10]
    np.testing.assert_allclose(compiled(batch), fc32.reference(batch), atol=1e-4)
    assert tune.recipe_from_log(fc32, log)[0].knob_values() == {
        **tune.recipe_from_log(fc32, log)[0].knob_values(), **best.as_dict()}

    # resume: the same budget again measures nothing new
    tune.tune(fc32, trials=3, log=log, trees=trees, repeats=1, max_batches=2, knobs=KNOBS, progress=None)
    assert len(log.read_text().splitlines()) == 3


def test_leaders_are_retimed_in_turn_and_ranked_by_those_times(fc32, trees, tmp_path):
    log = tmp_path / "tuning.jsonl"
    progress = tmp_path / "progress.txt"
    with open(progress, "w") as out:
        best = tune.tune(fc32, trials=3, log=log, trees=trees, repeats=1, max_batches=2, knobs=KNOBS,
                         progress=out, confirm_rounds=2)
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert [r["warm"] for r in records] == [False] + [True] * (len(records) - 1)   # only the first is cold
    assert len(records) == 3 + 3 and all(r["error"] is None for r in records)     # top 3, one record each
    trials, retimed = records[:3], records[3:]
    assert all(r["in_turn"] is None for r in trials)
    assert len({r["in_turn"] for r in retimed}) == 1 and retimed[0]["in_turn"] >= trials[-1]["time"]
    assert {TuningPoint.from_json(r["knobs"]) for r in retimed} == {TuningPoint.from_json(r["knobs"]) for r in trials}
    assert all(len(r["latencies"]) == 2 for r in retimed)        # a figure per batch: its best over the rounds
    fastest = min(retimed, key=lambda r: r["mean"])
    assert best == TuningPoint.from_json(fastest["knobs"])       # the in-turn times decide, nothing else
    text = progress.read_text()
    assert text.count("re-timing the 3 leading points in turn, 2 rounds") == 1
    assert "in turn, 1 of 3" in text and "in turn, 3 of 3" in text
    assert "the default among them" not in text          # this narrowed space has no default point
    last = [line for line in text.splitlines() if line.startswith("tune: ")][-2]
    default = Space(fc32, knobs=KNOBS).default()      # not in this narrowed space: never measured
    assert best != default and default not in {TuningPoint.from_json(r["knobs"]) for r in records}
    assert f"best {fastest['mean'] * 1e3:.3f} ms (timed in turn)" in last and "the default was not measured" in last
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        recipe, how = tune.recipe_from_log(fc32, log)
    assert how == "exact" and recipe.knob_values() == {**recipe.knob_values(), **best.as_dict()}


def test_nearest_and_missing_records_warn(fc32, tmp_path):
    log = tmp_path / "tuning.jsonl"
    db = tune.Database(log)
    point = Space(fc32).default()
    db.commit(tune.TuningRecord(tune.Workload.of(fc32), point, (1e-3,)))
    other = ct.models.TreeFC(hidden_size=64, vocab_size=50)
    with pytest.warns(UserWarning, match="no exact tuning record.*nearest"):
        recipe, how = tune.recipe_from_log(other, log)
    assert how == "nearest" and recipe.knob_values() == point.as_dict()
    lstm = ct.models.TreeLSTM(hidden_size=32, vocab_size=50)
    with pytest.warns(UserWarning, match="no tuning record for TreeLSTM.*default recipe"):
        recipe, how = tune.recipe_from_log(lstm, log)
    assert how == "default"


def test_failed_build_measures_inf(fc32, trees):
    from cortex_tvm.tune.measure import Measurer, tuning_batches
    measurer = Measurer(fc32, tuning_batches(fc32, trees, 10, 1), repeats=1)
    bad = TuningPoint.of(column_tile=32, node_tile=1, k_unroll=4, unroll_depth=2, parallel_columns=True,
                         per_level=True)
    result = measurer.measure(Space(fc32, recipe="treefc_llvm"), bad)
    assert result.mean == float("inf") and "per_level_kernels" in result.error

    class Broken(Space):
        def recipe_for(self, point):
            raise RuntimeError("LLVM fell over")
    result = measurer.measure(Broken(fc32), Space(fc32).default())
    assert result.mean == float("inf") and "LLVM fell over" in result.error


def test_cli_registers_tune():
    import argparse

    from cortex_tvm.cli import _add_tune_parser
    parser = argparse.ArgumentParser()
    _add_tune_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["tune", "treefc", "--trials", "4", "--log", "x.jsonl", "--hidden", "32",
                              "--batch", "5", "--seconds", "10"])
    assert (args.model, args.trials, args.log, args.hidden, args.batch, args.seconds) == \
        ("treefc", 4, "x.jsonl", 32, 5, 10.0)


def test_every_batch_is_checked_not_only_the_first(fc32, trees):
    """A point whose roots are wrong on one batch only (here: a reference moved on batch 2) is a
    failed trial naming that batch; with the true references the same point measures."""
    from cortex_tvm.tune.measure import Measurer, tuning_batches
    measurer = Measurer(fc32, tuning_batches(fc32, trees, 10, 3), repeats=1, warmup=0)
    point = Space(fc32).default()
    assert np.isfinite(measurer.measure(Space(fc32), point).mean)
    measurer._expected[2] = measurer._expected[2] + 0.01
    result = measurer.measure(Space(fc32), point)
    assert result.mean == float("inf") and result.error.startswith("wrong numbers on batch 2")


def test_cli_show_names_a_bad_schedule_and_every_option_has_help(capsys):
    from cortex_tvm import cli
    assert cli.main(["show", "treefc", "--hidden", "16", "--schedule", "no_such_recipe"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("show: --schedule 'no_such_recipe': unknown schedule") and "Traceback" not in err
    for command in ("demo", "show", "tune", "bench"):
        with pytest.raises(SystemExit):
            cli.main([command, "--help"])
        text = capsys.readouterr().out
        for option in ("--hidden", "--target", "--batch", "--vocab"):
            if option in text:
                line = text[text.index(option):].split("\n  -")[0]
                assert len(line.split()) > 2, f"{command} {option} has no help text: {line!r}"


def test_cli_names_an_unknown_model_and_refuses_zero_trials(capsys):
    from cortex_tvm import cli
    assert cli.main(["show", "nosuchmodel"]) == 2          # a one-line exit: status 2, no traceback
    err = capsys.readouterr().err
    assert re.fullmatch(r"show: unknown model 'nosuchmodel'; models: \[.*'treelstm'.*\], or MODULE:NAME\n", err), err
    assert cli.main(["tune", "treefc", "--hidden", "16", "--trials", "0"]) == 2
    assert "tune: --trials must be at least 1, got 0" in capsys.readouterr().err


def test_bf16_records_serve_bf16_builds_only(fc32, trees, tmp_path):
    """A bf16 tune measures bf16 builds and keys its records by precision: compile(precision="bf16")
    takes them exactly, an fp32 compile finds nothing for itself in that log."""
    log = tmp_path / "bf16.jsonl"
    space = Space(fc32, "llvm", knobs=KNOBS, precision="bf16")
    from cortex_tvm.schedule import RecSchedule
    rs = space.recipe_for(next(space.points())).apply(RecSchedule(space.padded_model.lower(specialize_leaves=False)))
    assert rs.trace[-1].primitive == "store_bf16" and rs.plan.bf16_weights == ("W",)
    tune.tune(fc32, trials=2, log=log, trees=trees, batch_size=10, repeats=1, max_batches=2, knobs=KNOBS,
              confirm_rounds=0, progress=None, precision="bf16")
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(records) == 2 and all(r["workload"]["precision"] == "bf16" and r["error"] is None for r in records)
    with warnings.catch_warnings():
        warnings.simplefilter("error")            # the exact record: no warning
        compiled = fc32.compile(tuning_log=str(log), precision="bf16")
    assert compiled.precision == "bf16" and compiled.plan.bf16_weights == ("W",)
    batch = trees[:10]
    assert 0 < float(np.abs(compiled(batch) - fc32.reference(batch)).max()) < 1e-2
    with pytest.warns(UserWarning, match="no record|measured on"):
        fp32 = fc32.compile(tuning_log=str(log))
    assert fp32.precision == "fp32"
