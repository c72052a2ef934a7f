"""A model compiled for another CPU (AVX-512 code on an AVX2 host, say) is built, inspected and
exported, but nothing of it runs here: not the parameter transforms, not the compiled check,
not the kernel.  Running it is a ValueError naming the missing features, never an illegal
instruction that kills the process."""
import numpy as np
import pytest

import cortex_tvm as ct
from cortex_tvm.runtime import cannot_run_here
from cortex_tvm.target import make_target

CANDIDATES = ("sapphirerapids", "znver4", "skylake-avx512")


def _foreign_target():
    for mcpu in CANDIDATES:
        target = {"kind": "llvm", "mtriple": "x86_64-linux-gnu", "mcpu": mcpu}
        if cannot_run_here(make_target(target)):
            return target
    pytest.skip(f"this CPU runs code for every one of {CANDIDATES}")


def test_compiled_for_another_cpu_builds_but_refuses_to_run(tmp_path):
    target = _foreign_target()
    model = ct.models.TreeLSTM(hidden_size=16, vocab_size=20)
    compiled = model.compile(target=target)                    # the transforms would not run here
    assert "vfmadd" in compiled.executable.mod.inspect_source("asm")
    trees = [ct.data.Node(children=[ct.data.Node(word=1), ct.data.Node(word=2)])]
    with pytest.raises(ValueError, match="compiled for another CPU.*lacks"):
        compiled(trees)
    with pytest.raises(ValueError, match="compiled for another CPU"):
        compiled.load_weights(model.weights)(trees)
    compiled.export(tmp_path / "m")
    with pytest.raises(ValueError, match="lacks"):
        ct.load(tmp_path / "m")
    # the host's own build of the same model runs
    np.testing.assert_allclose(model.compile()(trees), model.reference(trees), atol=1e-5)


def test_the_host_target_runs_here():
    assert cannot_run_here(make_target("llvm")) is None


def test_the_host_target_leaves_out_what_this_cpu_hides(monkeypatch):
    """A VM may hide extensions of its CPU model (a KVM guest on Zen 5 reports no rdseed, which
    LLVM's znver5 has): "llvm" then builds without them, instead of code this CPU refuses."""
    from tvm.target import Target, codegen

    from cortex_tvm import target as target_module
    reported = target_module.host_isa()
    model = set(codegen.llvm_get_cpu_features(Target({"kind": "llvm", "mcpu": codegen.llvm_get_system_cpu()})))
    hideable = sorted(model & reported - {"sse", "sse2"})
    if not hideable:
        pytest.skip("LLVM's model of this CPU has no x86 extension to hide")
    hidden = hideable[-1]
    monkeypatch.setattr(target_module, "host_isa", lambda: reported - {hidden})
    target = make_target("llvm")
    assert f"-{hidden}" in [str(a) for a in target.attrs["mattr"]]
    assert hidden not in set(codegen.llvm_get_cpu_features(target))
    assert cannot_run_here(target) is None
    # naming this CPU's model in a dict ("--mcpu native" in the cost data) means this CPU too
    named = make_target({"kind": "llvm", "mcpu": codegen.llvm_get_system_cpu()})
    assert f"-{hidden}" in [str(a) for a in named.attrs["mattr"]]
    assert cannot_run_here(named) is None


def test_a_cpu_reported_as_another_model_gets_the_model_it_matches(monkeypatch):
    """A KVM guest on a Sapphire Rapids class Xeon can report CPU model 167, which LLVM takes for
    Rocket Lake (no AVX512_BF16, no AMX, one FMA unit): "llvm" then builds for the model whose
    extensions match what the CPU reports.  A CPU that matches LLVM's guess keeps it."""
    from tvm.target import codegen

    from cortex_tvm import target as target_module
    monkeypatch.setattr(codegen, "llvm_get_system_triple", lambda: "x86_64-pc-linux-gnu")
    monkeypatch.setattr(codegen, "llvm_get_system_cpu", lambda: "rocketlake")
    monkeypatch.setattr(target_module, "host_isa", lambda: set(target_module.model_isa("sapphirerapids")))
    assert target_module.host_model() == "sapphirerapids"
    made = make_target("llvm")
    assert str(made.attrs["mcpu"]) == "sapphirerapids" and "mattr" not in made.attrs
    info = target_module.cpu_info(made)
    assert info.fma_units == 2 and info.key == "sapphirerapids/avx512"
    assert {"avx512bf16", "amx-bf16", "amx-tile"} <= set(codegen.llvm_get_cpu_features(made))
    # naming LLVM's guess in a dict means this CPU too
    assert str(make_target({"kind": "llvm", "mcpu": "rocketlake"}).attrs["mcpu"]) == "sapphirerapids"
    # what LLVM's guess matches exactly stays (a Rocket Lake reports Rocket Lake's extensions)
    monkeypatch.setattr(target_module, "host_isa", lambda: set(target_module.model_isa("rocketlake")))
    assert target_module.host_model() == "rocketlake"
    # a model that would need an extension the CPU lacks is not taken over the guess
    monkeypatch.setattr(codegen, "llvm_get_system_cpu", lambda: "znver4")
    monkeypatch.setattr(target_module, "host_isa", lambda: set(target_module.model_isa("znver4")))
    assert target_module.host_model() == "znver4"
