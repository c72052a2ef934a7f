"""Weight loading: load_weights then compile, copies of the caller's arrays, seeded weights,
PyTorch-named aliases, tensors, every rejected weight; the models' constructors' size checks."""
import numpy as np
import pytest

import cortex_tvm as ct
from cortex_tvm.data import random_trees

import reference as ref
from zoo_checks import assert_close


def _random_weights(model, seed):
    rng = np.random.default_rng(seed)
    return {k: (rng.standard_normal(v.shape) * 0.3).astype(np.float32) for k, v in model.weights.items()}


@pytest.mark.parametrize("name", ["TreeFC", "TreeLSTM"])
def test_load_weights_then_compile(name, sst):
    trees = sst[0][:20]
    model = getattr(ct.models, name)(hidden_size=32, vocab_size=len(sst[1]))
    old = {k: v.copy() for k, v in model.weights.items()}
    before = model.compile()
    new = _random_weights(model, seed=42)
    assert model.load_weights(new) is model
    after = model.compile()
    assert_close(after(trees), ref.roots(name, trees, new))
    # the model compiled earlier keeps the weights it was compiled with
    assert_close(before(trees), ref.roots(name, trees, old))


@pytest.mark.parametrize("name", ["TreeFC", "TreeLSTM"])
def test_load_weights_copies_callers_arrays(name, sst):
    """Like torch's load_state_dict: editing the caller's arrays afterwards changes nothing loaded."""
    trees = sst[0][:20]
    model = getattr(ct.models, name)(hidden_size=32, vocab_size=len(sst[1]))
    new = _random_weights(model, seed=43)
    model.load_weights(new)
    after = model.compile()
    out = after(trees)
    for v in new.values():
        v[...] = 0
    np.testing.assert_array_equal(after(trees), out)
    for k, v in new.items():
        assert not np.shares_memory(model.weights[k], v)


def test_compiled_model_keeps_weights_when_model_arrays_mutated(sst):
    """CompiledModel's docstring: "Weights are copied in at compile time"."""
    trees = sst[0][:10]
    model = ct.models.TreeFC(hidden_size=32, vocab_size=len(sst[1]))
    compiled = model.compile()
    out = compiled(trees)
    model.weights["W"][...] = 0.0
    np.testing.assert_array_equal(compiled(trees), out)


def test_seeded_weights_are_deterministic(sst):
    a = ct.models.TreeLSTM(hidden_size=32, vocab_size=50)
    b = ct.models.TreeLSTM(hidden_size=32, vocab_size=50)
    c = ct.models.TreeLSTM(hidden_size=32, vocab_size=50, seed=1)
    for k in a.weights:
        assert a.weights[k].dtype == np.float32
        np.testing.assert_array_equal(a.weights[k], b.weights[k])
    assert any(not np.array_equal(a.weights[k], c.weights[k]) for k in a.weights)


@pytest.mark.parametrize("name", ["TreeFC", "TreeLSTM"])
def test_load_weights_aliases(name):
    model = getattr(ct.models, name)(hidden_size=32, vocab_size=60)
    new = _random_weights(model, seed=7)
    inverse = {ours: theirs for theirs, ours in model.aliases.items()}
    assert set(inverse) == set(model.weights), "every weight has a state_dict alias"
    state_dict = {inverse[k]: v for k, v in new.items()}
    model.load_weights(state_dict)
    for k, v in new.items():
        np.testing.assert_array_equal(model.weights[k], v)
    trees = random_trees(8, (1, 12), seed=1, vocab_size=60)
    assert_close(model.compile()(trees), ref.roots(name, trees, new))


def test_tree_lstm_aliases_are_pytorch_names():
    assert ct.models.TreeLSTM.aliases == {"emb.weight": "emb", "W.weight": "W", "W.bias": "bW",
                                         "U.weight": "U", "U.bias": "bU"}
    assert ct.models.TreeFC.aliases == {"emb.weight": "emb", "W.weight": "W", "W.bias": "b"}


class _FakeTensor:
    """Duck-types the bits of torch.Tensor that load_weights uses."""

    def __init__(self, array):
        self._array = array

    def detach(self):
        return self

    def cpu(self):
        return self

    def numpy(self):
        return self._array


def test_load_weights_tensor_like_objects():
    model = ct.models.TreeFC(hidden_size=32, vocab_size=60)
    new = _random_weights(model, seed=8)
    model.load_weights({k: _FakeTensor(v) for k, v in new.items()})
    for k, v in new.items():
        np.testing.assert_array_equal(model.weights[k], v)


@pytest.mark.parametrize("name", ["TreeFC", "TreeLSTM"])
def test_load_weights_torch(name):
    torch = pytest.importorskip("torch")
    model = getattr(ct.models, name)(hidden_size=32, vocab_size=60)
    new = _random_weights(model, seed=9)
    model.load_weights({k: torch.from_numpy(v.copy()) for k, v in new.items()})
    trees = random_trees(8, (1, 12), seed=1, vocab_size=60)
    assert_close(model.compile()(trees), ref.roots(name, trees, new))
    inverse = {ours: theirs for theirs, ours in model.aliases.items()}
    model.load_weights({inverse[k]: torch.from_numpy(v.copy()).requires_grad_(True) for k, v in new.items()})
    with pytest.raises(TypeError, match="dtype"):
        model.load_weights({k: torch.from_numpy(v.astype(np.float64)) for k, v in new.items()})


def _bad_weight_cases():
    def base():
        m = ct.models.TreeLSTM(hidden_size=32, vocab_size=60)
        return {k: v.copy() for k, v in m.weights.items()}

    missing = base(); del missing["U"]
    extra = base(); extra["V"] = np.zeros(3, np.float32)
    shape = base(); shape["W"] = np.zeros((96, 31), np.float32)
    transposed = base(); transposed["U"] = np.ascontiguousarray(transposed["U"].T)
    f64 = base(); f64["bU"] = f64["bU"].astype(np.float64)
    ints = base(); ints["emb"] = np.zeros((60, 32), np.int32)
    f16 = base(); f16["W"] = f16["W"].astype(np.float16)
    listy = base(); listy["bW"] = listy["bW"].tolist()
    nan = base(); nan["bU"][3] = np.nan
    return [
        ("missing", missing, ValueError, "missing"),
        ("extra", extra, ValueError, "unexpected"),
        ("shape", shape, ValueError, "shape"),
        ("transposed", transposed, ValueError, "shape"),
        ("float64", f64, TypeError, "dtype"),
        ("int", ints, TypeError, "dtype"),
        ("float16", f16, TypeError, "dtype"),
        ("list", listy, TypeError, "numpy"),
        ("nan", nan, ValueError, "NaN"),
        ("not a dict", [("emb", 1)], TypeError, "dict"),
        ("none", None, TypeError, "dict"),
        ("array", np.zeros(3, np.float32), TypeError, "dict"),
    ]


@pytest.mark.parametrize("case", _bad_weight_cases(), ids=lambda c: c[0])
def test_load_weights_rejects(case):
    _, weights, exc, match = case
    model = ct.models.TreeLSTM(hidden_size=32, vocab_size=60)
    before = {k: v.copy() for k, v in model.weights.items()}
    with pytest.raises(exc, match=match):
        model.load_weights(weights)
    # a failed load leaves the model's weights untouched
    for k, v in before.items():
        np.testing.assert_array_equal(model.weights[k], v)


def test_model_constructor_rejects_bad_sizes():
    for bad in (0, -1, 2.0, True, None):
        with pytest.raises(ValueError, match="hidden_size"):
            ct.models.TreeFC(hidden_size=bad, vocab_size=10)
        with pytest.raises(ValueError, match="vocab_size"):
            ct.models.TreeLSTM(hidden_size=8, vocab_size=bad)
