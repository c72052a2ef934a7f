"""Issue 22, "stage records instead of a mutated model": the padded model is the user's model
`resized`, never the user's object changed, and how it is padded travels in a record
(`padding.Padding`, in `ProgramFacts.padding`), not in an attribute of a model."""
import numpy as np
import pytest

import cortex_tvm as ct
from cortex_tvm.data import random_trees
from cortex_tvm.policy import padding
from cortex_tvm.target import cpu_info, make_target
from frontend.cells import tree_fc

V = 30


def _state(model) -> dict:
    """The model's attributes other than the caches its stages fill (program, lowerings)."""
    return {k: v for k, v in model.__dict__.items() if k not in model.size_caches}


def test_a_compile_leaves_the_users_model_as_it_was_and_records_the_padding():
    user = ct.models.TreeLSTM(hidden_size=150, vocab_size=V)
    before, weights = _state(user), dict(user.weights)
    copies = {name: w.copy() for name, w in weights.items()}
    facts = padding.program_facts(user, "llvm")
    compiled = user.compile()
    assert _state(user).keys() == before.keys()
    assert all(_state(user)[k] is v for k, v in before.items())
    assert user.weights.keys() == weights.keys() and all(user.weights[n] is w for n, w in weights.items())
    assert all(np.array_equal(user.weights[n], w) for n, w in copies.items())
    assert user.hidden_size == 150 and user.weights["U"].shape == (750, 300)
    # a TreeLSTM's register tile holds its five gates of one vector: it pads to the vector width
    lanes = cpu_info(make_target("llvm")).lanes
    to = -(-150 // lanes) * lanes
    assert facts.padding.multiple == lanes
    assert facts.padding.sizes == {"hidden_size": (150, to), "embed_size": (150, to)}
    assert facts.padding.weight_padding["U"] == ((0, 5, 150, to), (1, 2, 150, to))
    assert facts.padded_model is not user and facts.padded_model.hidden_size == to
    assert facts.padded_model.weights["U"].shape == (5 * to, 2 * to)
    for model in (user, facts.padded_model):
        assert not hasattr(model, "weight_padding")
    assert compiled.weight_padding["U"] == [(0, 5, 150, to), (1, 2, 150, to)]
    trees = random_trees(4, (2, 12), seed=0, vocab_size=V)
    np.testing.assert_allclose(compiled(trees), user.reference(trees), atol=1e-4)


def test_an_unpadded_compile_has_no_padding():
    user = ct.models.TreeFC(hidden_size=64, vocab_size=V)        # whole vectors on AVX2 and AVX-512
    facts = padding.program_facts(user, "llvm")
    assert facts.padding is None and facts.padded_model is user
    assert user.compile().weight_padding == {}


def test_resized_is_a_copy_at_other_sizes():
    model = ct.models.TreeFC(hidden_size=13, vocab_size=V)
    assert model.program.states[0].shape[0] == 13 and model.lower(specialize_leaves=False) is not None
    wider = model.resized(hidden_size=16)
    assert wider is not model and type(wider) is type(model)
    assert (model.hidden_size, wider.hidden_size) == (13, 16)
    assert int(wider.program.states[0].shape[0]) == 16 and int(model.program.states[0].shape[0]) == 13
    assert wider.weight_shapes()["W"] == (16, 16) and model.weight_shapes()["W"] == (13, 13)
    # the weights are the caller's to set: the copy's dict is its own, its arrays still this model's
    assert wider.weights is not model.weights and wider.weights["W"] is model.weights["W"]
    wider.weights["W"] = np.zeros((16, 16), np.float32)
    assert model.weights["W"].shape == (13, 13)
    with pytest.raises(ValueError, match="hidden_size"):
        model.resized(hidden_size=0)
    with pytest.raises(TypeError, match="no size attribute 'depth'"):
        model.resized(depth=3)


def test_padding_apply_pads_the_weights_in_blocks():
    model = ct.models.TreeLSTM(hidden_size=5, vocab_size=V)
    how = padding.padding_of(model, 8)
    kernel = how.apply(model)
    assert how.sizes["hidden_size"] == (5, 8) and kernel.hidden_size == 8 and model.hidden_size == 5
    U = kernel.weights["U"].reshape(5, 8, 2, 8)       # five gate blocks of rows, two child blocks of columns
    np.testing.assert_array_equal(U[:, :5, :, :5], model.weights["U"].reshape(5, 5, 2, 5))
    assert not U[:, 5:].any() and not U[:, :, :, 5:].any()
    assert padding.padded(model, 8).weight_shapes() == kernel.weight_shapes()
    assert padding.padding_of(model, 1) is None and padding.padding_of(model, 5) is None


def test_a_traced_model_resized_keeps_its_traces_apart():
    rng = np.random.default_rng(0)
    weights = {"emb": rng.standard_normal((V, 13), np.float32), "W": rng.standard_normal((13, 13), np.float32),
               "b": rng.standard_normal(13, np.float32)}
    user = ct.frontend.TracedModel(tree_fc, weights)
    traces = dict(user._traces)
    kernel = padding.program_facts(user, "llvm").padded_model
    assert kernel.hidden_size > 13 and int(kernel.program.states[0].shape[0]) == kernel.hidden_size
    assert user._traces == traces and user.hidden_size == 13 and not hasattr(user, "weight_padding")
