"""The compile-time chooser (tune/pretrained.py): the shipped cost model is present, used by
compile(schedule="ranked") without a measurement, and not asked by plain compile().  Training it
offline, and how it ranks models held out of its data, is tests/tune/test_train_cost_model.py."""
import pytest

import cortex_tvm as ct
from cortex_tvm import recipes
from cortex_tvm.policy.padding import padded_model
from cortex_tvm.tune import pretrained

pytest.importorskip("xgboost")


def test_a_model_ships_and_compile_ranked_uses_its_choice(fc32):
    assert pretrained.shipped_booster() is not None
    target = ct.make_target("llvm")
    padded = padded_model(fc32, target)
    derived = recipes.resolve(padded, target, None)
    chosen = pretrained.choose(derived, padded, target)
    assert chosen.name == "derived"
    assert ct.tune.TuningPoint.of(**chosen.knob_values()) in pretrained.candidates(derived)
    fresh = ct.models.TreeFC(hidden_size=24, vocab_size=37, seed=11)   # sizes no other test builds
    before = ct.compile_count()
    compiled = fresh.compile(schedule="ranked")
    assert ct.compile_count() - before == 1            # one build: nothing was measured
    assert compiled.recipe_name == "derived"
    padded = padded_model(fresh, target)
    picked = pretrained.choose(recipes.resolve(padded, target, None), padded, target).knob_values()
    assert [s["args"] for s in compiled.trace if s["primitive"] == "tile_gemm"][0]["node_tile"] == picked["node_tile"]


def test_compile_without_a_log_takes_the_analytic_point_and_ranks_nothing(monkeypatch):
    """The rule's point, not the model's: held out, the model's pick is no better (docs/tuning.md)
    and ranking applies every candidate's schedule."""
    monkeypatch.setattr(pretrained, "_rank", lambda *a: pytest.fail("compile() ranked candidates"))
    model = ct.models.TreeFC(hidden_size=24, vocab_size=37, seed=12)
    compiled = model.compile()
    target = ct.make_target("llvm")
    rule = recipes.resolve(padded_model(model, target), target, None).knob_values()
    assert [s["args"] for s in compiled.trace if s["primitive"] == "tile_gemm"][0]["node_tile"] == rule["node_tile"]
    with pytest.raises(ValueError, match="ranks the derived CPU schedule"):
        model.compile(target="cuda", schedule="ranked")


def test_ranked_with_a_tuning_log_takes_the_logs_record_else_ranks(tmp_path, monkeypatch):
    """A log's record wins over the ranking; a log with nothing for the model leaves the ranking."""
    from cortex_tvm.tune import Database, TuningRecord, Workload
    model = ct.models.TreeFC(hidden_size=24, vocab_size=37, seed=13)
    target = ct.make_target("llvm")
    space = ct.tune.Space(model, target)
    point = ct.tune.TuningPoint.of(**{**space.default().as_dict(), "node_tile": 1})
    log = tmp_path / "t.jsonl"
    Database(log).commit(TuningRecord(Workload.of(model, target, 10), point, (1e-4,), warm=True))
    with_log = model.compile(schedule="ranked", tuning_log=str(log))
    assert [s["args"] for s in with_log.trace if s["primitive"] == "tile_gemm"][0]["node_tile"] == 1
    ranked = []
    monkeypatch.setattr(pretrained, "_rank", lambda *a: ranked.append(1) or None)
    other = ct.models.TreeLSTM(hidden_size=24, vocab_size=37, seed=13)      # nothing in the log
    with pytest.warns(UserWarning, match="no tuning record"):
        other.compile(schedule="ranked", tuning_log=str(log))
    assert ranked == [1]


@pytest.mark.parametrize("name", ["SeqGRU", "DAGRNN", "ChildSumTreeLSTM"])
def test_typical_batch_fits_every_structure(name):
    model = padded_model(getattr(ct.models, name)(16, 30), ct.make_target("llvm"))
    batch = pretrained.typical_batch(model)
    assert len(batch) == 10 and model.linearize(batch).num_slots > 10


def test_tune_ranks_with_the_kernels_padded_sizes(monkeypatch, trees):
    """Training data, the ranked compile and the tuner's cost model all see the kernel's sizes:
    H=13 runs as a 16-wide kernel, and the workload statistics say 16."""
    from cortex_tvm import tune
    seen = {}

    def fake_search(space, measurer, database, workload, stats, config, log):
        seen["stats"] = stats
        return None
    monkeypatch.setattr(tune, "search", fake_search)
    model = ct.models.TreeFC(hidden_size=13, vocab_size=5374)
    tune.tune(model, trials=1, log=None, trees=trees, max_batches=1, progress=None)
    kernel = padded_model(model, ct.make_target("llvm"))
    assert kernel.hidden_size == 16 and seen["stats"].hidden == 16 and seen["stats"].embed == 16
    assert pretrained.typical_stats(kernel).hidden == 16


def test_alternate_times_builds_in_turn_and_keeps_each_batchs_best():
    """A slow spell of the machine falls on every build, not on the one timed during it; each
    batch keeps its best over the rounds (DESIGN.md: the mean over batches of each batch's best)."""
    import time
    from cortex_tvm.bench.common import alternate
    calls = []
    # per round and build: a warm-up call on batch 0, then batch 0 and batch 1 (repeats=1);
    # "x" is slow on batch 0 in round 1 and on batch 1 in round 2
    sleeps = {"x": iter([0, 0.02, 0.001, 0, 0.001, 0.02]), "y": iter([0.0] * 6)}

    def build(label):
        def run(batch):
            calls.append((label, batch))
            time.sleep(next(sleeps[label]))
        return run
    seconds = alternate({"x": build("x"), "y": build("y")}, [0, 1], rounds=2, repeats=1)
    assert [c[0] for c in calls] == ["x"] * 3 + ["y"] * 3 + ["x"] * 3 + ["y"] * 3     # in turn
    assert seconds["x"] < 0.01        # each batch's best (~1 ms), not the best round's mean (~10 ms)
    assert seconds["y"] < seconds["x"]
