"""One compile finds its facts once: the GEMM analysis (`derive.gemms`), the target
(`make_target` of the user's argument) and the recipe (`recipes.resolve`) are each found once and
handed down the pipeline (`padding.ProgramFacts`), not found again by each stage."""
import sys
from collections import Counter

import numpy as np
import pytest
from tvm.target import Target

import cortex_tvm as ct
from cortex_tvm import build, compiler, recipes
from cortex_tvm.policy import padding
from cortex_tvm import target as _target
from cortex_tvm.policy import derive
from cortex_tvm.schedule import RecSchedule
from cortex_tvm.tune import Database, Space, TuningRecord, Workload

H, V = 16, 50


@pytest.fixture
def counts(monkeypatch):
    """Counter of the calls that find something: derive.gemms, make_target given anything but a
    Target (a Target is returned as it is: nothing made), recipes.resolve, and the stages
    padding.program_facts and build.schedule_model; counted wherever the function is called from
    (its module and every module that imported its name)."""
    found = Counter()

    def count(module, name, counts_call=lambda *a, **k: True):
        original = getattr(module, name)

        def counted(*args, **kwargs):
            found[name] += bool(counts_call(*args, **kwargs))
            return original(*args, **kwargs)
        for mod in list(sys.modules.values()):
            if getattr(mod, "__name__", "").startswith("cortex_tvm"):
                for attr, value in list(vars(mod).items()):
                    if value is original:
                        monkeypatch.setattr(mod, attr, counted)
    count(derive, "gemms")
    count(_target, "make_target", lambda target, *a, **k: not isinstance(target, Target))
    count(recipes, "resolve")
    count(padding, "program_facts")
    count(build, "schedule_model")
    return found


@pytest.mark.parametrize("model, options", [
    ("TreeLSTM", {}),
    ("TreeLSTM", {"training": True}),
    ("TreeFC", {"target": "cuda"}),          # builds without a GPU
])
def test_a_compile_finds_the_gemms_the_target_and_the_recipe_once(counts, model, options):
    getattr(ct.models, model)(hidden_size=H, vocab_size=V).compile(**options)
    cpu = options.get("target", "llvm") == "llvm"
    # (off a CPU no stage reads the GEMMs: the CUDA recipes are not derived from them)
    assert {k: counts[k] for k in ("gemms", "make_target", "resolve")} == \
        {"gemms": 1 if cpu else 0, "make_target": 1, "resolve": 1}


def _log_of_one_record(model, target, path):
    """A tuning log with one record for `model` on `target` at a valid point other than the
    default, written as `tune` writes it (no measuring: the compile only reads the knobs)."""
    space = Space(model, target)
    default = space.default()
    point = next(p for p in space.sample(8, np.random.default_rng(0)) if p != default)
    Database(path).commit(TuningRecord(Workload.of(model, space.target, 10), point, latencies=(1e-3,),
                                       recipe=space.fingerprint))
    return str(path)


@pytest.mark.parametrize("model, target", [("TreeFC", "llvm"), ("TreeLSTM", {"kind": "llvm", "mcpu": "haswell"})])
def test_a_compile_from_a_tuning_log_finds_its_facts_once(counts, tmp_path, model, target):
    """The log's recipe is looked up on the compile's own facts (`tune.apply.resolve_recipe`):
    its knob space is the padded model's derived recipe, resolved once, on the GEMMs found once."""
    model = getattr(ct.models, model)(hidden_size=H, vocab_size=V)
    log = _log_of_one_record(model, target, tmp_path / "tuning.jsonl")
    counts.clear()
    compiled = model.compile(target=target, tuning_log=log)
    assert compiled.recipe_name == "derived"
    assert {k: counts[k] for k in ("gemms", "make_target", "resolve")} == \
        {"gemms": 1, "make_target": 1, "resolve": 1}


@pytest.mark.parametrize("target", ["llvm", "aarch64"])
def test_a_cross_compile_finds_its_facts_once(counts, tmp_path, target):
    compiler.cross_compile(ct.models.TreeFC(hidden_size=H, vocab_size=V), target, tmp_path / "treefc.o")
    assert {k: counts[k] for k in ("gemms", "make_target", "resolve")} == \
        {"gemms": 1, "make_target": 1, "resolve": 1}


@pytest.mark.parametrize("target", ["llvm", {"kind": "llvm", "mcpu": "haswell"}])
@pytest.mark.parametrize("name", sorted(ct.models.BY_NAME))
def test_the_padded_models_gemms_are_the_models_at_the_padded_sizes(name, target):
    """`padded_gemms` (the facts of a padded model, without a second analysis) gives what the
    analysis of the padded model's program gives."""
    model = ct.models.BY_NAME[name](hidden_size=20, vocab_size=V)
    facts = padding.program_facts(model, target)
    assert facts.padded_model is not model            # H=20 pads on AVX2 (24) and AVX-512 (32)
    assert facts.gemms == tuple(derive.gemms(RecSchedule(facts.padded_model.lower(specialize_leaves=True))))


@pytest.mark.parametrize("name", ["treelstm", "treegru", "seqlstm", "dagrnn"])
def test_derive_takes_the_gemms_of_the_prepared_program_from_the_facts(name):
    """The derived schedule's first steps (leaf tables, level tails or padded levels) change the
    program; the GEMMs after them (a tail's copies) follow from the facts' GEMMs."""
    facts = padding.program_facts(ct.models.BY_NAME[name](hidden_size=H, vocab_size=V), "llvm")
    for hoist in (True, False):
        for level_tails in (True, False):
            rs = RecSchedule(facts.padded_model.lower(specialize_leaves=False))
            given = derive._prepare(rs, 3, hoist, level_tails, program_gemms=facts.gemms)
            assert given == derive.gemms(rs)
            assert len(given) > len(facts.gemms) or not level_tails


def test_a_compile_hands_each_stage_one_record(counts, monkeypatch):
    """The facts are found once and handed to the scheduled stage (`compiler.Scheduled`), whose
    build is the CompiledModel: its recipe, trace and weight padding are the records' own."""
    stages = []

    def kept(*args, **kwargs):
        stages.append(original(*args, **kwargs))
        return stages[-1]
    original = compiler.scheduled
    monkeypatch.setattr(compiler, "scheduled", kept)
    compiled = ct.models.TreeLSTM(hidden_size=20, vocab_size=V).compile()    # pads on AVX2 and AVX-512
    assert {k: counts[k] for k in ("program_facts", "schedule_model")} == {"program_facts": 1, "schedule_model": 1}
    (stage,) = stages
    facts = stage.facts
    assert facts.padding is not None and facts.padded_model.hidden_size == facts.padding.sizes["hidden_size"][1]
    assert compiled.recipe_name == stage.recipe.name
    assert compiled.trace == [step.as_json() for step in stage.rs.trace]
    assert compiled.weight_padding == {name: list(pads) for name, pads in facts.padding.weight_padding.items()}
