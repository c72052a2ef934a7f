"""Old names kept as deprecated aliases (issue 22, "names that mislead"): each still works and
warns with DeprecationWarning naming its new name."""
import importlib
import sys

import pytest

import cortex_tvm as ct
from cortex_tvm import compiler
from cortex_tvm.policy import padding
from cortex_tvm.tune import Space


@pytest.fixture(scope="module")
def fc():
    return ct.models.TreeFC(hidden_size=20, vocab_size=30)      # pads on AVX2 (24) and AVX-512 (32)


def test_compiled_form_is_padded_model(fc):
    target = ct.make_target("llvm")
    want = padding.padded_model(fc, target)
    assert want.hidden_size > fc.hidden_size
    for old in (padding.compiled_form, compiler.compiled_form):
        with pytest.warns(DeprecationWarning, match="padded_model"):
            got = old(fc, target)
        assert got.hidden_size == want.hidden_size
        assert sorted(got.weights) == sorted(want.weights)


def test_kernel_model_attributes_are_padded_model(fc):
    facts = padding.program_facts(fc, "llvm")
    with pytest.warns(DeprecationWarning, match="padded_model"):
        assert facts.kernel_model is facts.padded_model
    space = Space(fc, facts=facts)
    assert space.padded_model is facts.padded_model
    with pytest.warns(DeprecationWarning, match="padded_model"):
        assert space.kernel_model is space.padded_model


def test_the_padding_module_moved_to_the_policy_package():
    sys.modules.pop("cortex_tvm.padding", None)
    with pytest.warns(DeprecationWarning, match="cortex_tvm.policy.padding"):
        old = importlib.import_module("cortex_tvm.padding")
    assert old.padded_model is padding.padded_model and old.ProgramFacts is padding.ProgramFacts
