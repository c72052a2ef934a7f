"""Tuning records are keyed by CPU and vector ISA: a record made on another CPU is never applied
silently (it warns and the default choice is used), and AVX2 and AVX-512 records differ."""
import warnings

import pytest

import cortex_tvm as ct
from cortex_tvm import tune
from cortex_tvm.tune import Space
from cortex_tvm.tune.workload import target_key

HASWELL = {"kind": "llvm", "mcpu": "haswell"}


def test_keys_name_cpu_and_isa():
    assert target_key(HASWELL) == "llvm:haswell/avx2"
    assert target_key({"kind": "llvm", "mcpu": "skylake-avx512"}) == "llvm:skylake-avx512/avx512"
    assert target_key("llvm").startswith("llvm:") and target_key("cuda") == "cuda"


def test_record_from_another_cpu_warns_and_is_not_applied(fc32, tmp_path):
    log = tmp_path / "other_cpu.jsonl"
    db = tune.Database(log)
    space = Space(fc32, HASWELL)
    odd = space.recipe.knobs["node_tile"][-1]           # not the default: visible if it were applied
    point = tune.TuningPoint.of(**{**space.default().as_dict(), "node_tile": odd})
    db.commit(tune.TuningRecord(tune.Workload.of(fc32, HASWELL), point, (1e-4,)))
    native = target_key("llvm")
    if native == "llvm:haswell/avx2":
        pytest.skip("this machine is a Haswell: the record is from this CPU")
    with pytest.warns(UserWarning, match="measured on llvm:haswell/avx2, not on this target"):
        compiled = fc32.compile(tuning_log=str(log))
    assert compiled.recipe_name == "derived"
    # on the CPU it was measured for, the same log applies without a warning
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        recipe, how = tune.recipe_from_log(fc32, log, HASWELL)
    assert how == "exact" and recipe.knob_values()["node_tile"] == odd


def test_unknown_mcpu_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown LLVM CPU mcpu='nosuchcpu'"):
        ct.make_target({"kind": "llvm", "mcpu": "nosuchcpu"})
    assert "haswell" in str(ct.make_target(HASWELL))
