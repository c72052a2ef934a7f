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
