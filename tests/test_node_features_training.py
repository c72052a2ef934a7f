"""Training a model fed node features: the gradients of its weights and of the features
themselves against float64 central differences, and backpropagation into the torch encoder that
made the features."""
import numpy as np
import pytest

import cortex_tvm as ct
from cortex_tvm.models.float64_walk import reference64

from node_features_util import TREES, close, preorder_forest, rows_for


def _loss64(model, trees, X, R, weights=None):
    probe = ct.models.TreeLSTM(model.hidden_size, inputs="features", embed_size=model.embed_size)
    probe.load_weights(weights or model.weights)
    return float((reference64(probe, trees, features=X) * R).sum())


def test_training_gradients_of_weights_and_features_match_central_differences():
    """vjp of a model fed features: every weight's gradient and the features' own (what an encoder
    that made them backpropagates), against float64 central differences of reference64."""
    Hs, Fs, trees = 8, 6, TREES[:3]
    model = ct.models.TreeLSTM(Hs, inputs="features", embed_size=Fs)
    X = rows_for(trees, Fs, seed=8)
    compiled = model.compile(training=True)
    out, vjp = compiled.vjp(trees, features=X)
    close(out, reference64(model, trees, features=X))
    R = np.random.default_rng(9).standard_normal(out.shape)
    grads = vjp(R.astype(np.float32))
    assert sorted(grads) == ["U", "W", "bU", "bW", "features"] and grads["features"].shape == X.shape
    eps, rng = 1e-4, np.random.default_rng(10)
    X64 = X.astype(np.float64)
    for _ in range(12):                                 # the features' gradient, sampled entries
        i, j = rng.integers(len(X)), rng.integers(Fs)
        up, down = X64.copy(), X64.copy()
        up[i, j] += eps
        down[i, j] -= eps
        want = (_loss64(model, trees, up, R) - _loss64(model, trees, down, R)) / (2 * eps)
        assert abs(grads["features"][i, j] - want) <= 1e-4 * max(1.0, np.abs(grads["features"]).max()), (i, j)
    for name in ("W", "U", "bW"):                      # the weights', sampled entries
        for _ in range(4):
            index = tuple(rng.integers(d) for d in model.weights[name].shape)
            moved = []
            for sign in (1, -1):
                w = {k: v.astype(np.float64) for k, v in model.weights.items()}
                w[name][index] += sign * eps
                moved.append(_loss64(model, trees, X64, R, {k: v.astype(np.float32) for k, v in w.items()}))
            want = (moved[0] - moved[1]) / (2 * eps)
            # float32 weights moved by 1e-4: the difference itself carries ~1e-3 relative error
            assert abs(grads[name][index] - want) <= 2e-3 * max(1.0, np.abs(grads[name]).max()), (name, index)
    # parent arrays: the features' gradient in the caller's node order
    parents, perm = preorder_forest(trees)
    _, vjp_arrays = compiled.vjp(parents=parents, features=X[perm])
    by_arrays = vjp_arrays(R[::-1].astype(np.float32))
    close(by_arrays["features"], grads["features"][perm], 1e-5)
    close(by_arrays["U"], grads["U"], 1e-5)
    with pytest.raises(ValueError, match="per-node features.*features="):
        compiled.vjp(trees)


def test_torch_module_backpropagates_into_the_encoder_that_made_the_features():
    """as_torch() of a model fed features: loss.backward() fills the weights' .grad and the
    features' own, so an encoder in front (here a Linear layer) trains through the tree model."""
    torch = pytest.importorskip("torch")
    Hs, Fs, trees = 8, 6, TREES[:3]
    model = ct.models.TreeLSTM(Hs, inputs="features", embed_size=Fs)
    module = model.compile(training=True).as_torch()
    tokens = torch.from_numpy(rows_for(trees, 5, seed=11))
    encoder = torch.nn.Linear(5, Fs)
    X = encoder(tokens)
    loss = (module(trees, features=X) ** 2).sum()
    loss.backward()
    assert encoder.weight.grad is not None and module.U.grad is not None
    # the same gradients from vjp: d loss / d X, pulled through the encoder by hand
    out, vjp = module.compiled.vjp(trees, features=X.detach().numpy())
    grads = vjp(2 * out)
    close(encoder.weight.grad.numpy(), grads["features"].T @ tokens.numpy(), 1e-5)
    close(module.U.grad.numpy(), grads["U"], 1e-5)
