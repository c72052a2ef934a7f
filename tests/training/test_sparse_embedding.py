"""An embedding's gradient as the batch's rows (`vjp(d_out, word_rows=True)`, `as_torch(sparse=True)`)
and the module's parameters shared with the compiled model (`load_weights(copy=False)`).

The references are the dense gradients the same compiled backward gives (themselves checked
against PyTorch autograd in test_torch_training.py) and torch's own Adagrad on dense gradients.
"""
import gc
import weakref

import numpy as np
import pytest

import cortex_tvm as ct
from cortex_tvm.weights import all_finite

torch = pytest.importorskip("torch")

H, E = 16, 24


@pytest.fixture(scope="module")
def setup(sst):
    trees, vocab = sst
    model = ct.models.TreeLSTM(H, len(vocab), embed_size=E, seed=5)
    return trees, model, model.compile(training=True)


def _labels(trees):
    return torch.tensor([n.label for t in trees for n in ct.data.postorder(t)])


def test_the_word_tables_are_the_weights_read_by_word(setup):
    _, model, compiled = setup
    assert compiled.adjoint.word_tables == {"emb": model.weights["emb"].shape}
    mv = ct.models.MVRNN(8, 40, seed=0).compile(training=True)
    assert sorted(mv.adjoint.word_tables) == ["emb", "embM"]          # a vector and a matrix per word
    assert mv.adjoint.word_tables["embM"] == (40, 8, 8)
    features = ct.models.TreeLSTM(H, inputs="features", embed_size=E, seed=0).compile(training=True)
    assert features.adjoint.word_tables == {}


@pytest.mark.parametrize("own_forward", [True, False])
def test_the_rows_of_a_pullback_equal_the_dense_gradient(setup, monkeypatch, own_forward):
    """The rows listed hold the dense gradient's rows, every other row of it is zero; a later
    dense pullback (whose table array the rows-only one zeroed again, without a memset) is
    unchanged by it."""
    trees, _, compiled = setup
    monkeypatch.setattr(compiled.adjoint.level_pass, "forward_pays", lambda lin: own_forward)
    first, second = trees[:9], trees[40:52]
    rng = np.random.default_rng(1)
    d_first = rng.standard_normal((len(first), H)).astype(np.float32)
    d_second = rng.standard_normal((len(second), H)).astype(np.float32)

    _, vjp = compiled.vjp(second)
    want_second = {name: g.copy() for name, g in vjp(d_second).items()}
    _, vjp = compiled.vjp(first)
    dense = {name: g.copy() for name, g in vjp(d_first).items()}
    for _ in range(2):                                   # twice: the second reuses the cleaned table
        _, vjp = compiled.vjp(first)
        rows = vjp.word_rows["emb"]
        words = {n.word for t in first for n in ct.data.postorder(t) if n.word is not None}
        assert rows.tolist() == sorted(words)
        got = vjp(d_first, word_rows=True)
        assert got["emb"].shape == (len(rows), E)
        np.testing.assert_array_equal(got["emb"], dense["emb"][rows])
        outside = np.setdiff1d(np.arange(dense["emb"].shape[0]), rows)
        assert not dense["emb"][outside].any()
        assert sorted(got) == sorted(dense)
        for name in set(dense) - {"emb"}:
            np.testing.assert_array_equal(got[name], dense[name], err_msg=name)
    _, vjp = compiled.vjp(second)
    for name, g in vjp(d_second).items():
        np.testing.assert_array_equal(g, want_second[name], err_msg=name)


def test_a_sparse_module_trains_as_the_dense_one(setup):
    """Its embedding's .grad is a sparse tensor of the batch's rows equal to the dense module's;
    DGL's Adagrad recipe (the table in a group of its own without weight decay) then takes the
    same steps as on the dense gradient.  Both modules wrap the same compiled model: each runs on
    its own parameters."""
    trees, _, compiled = setup
    batches = [trees[k:k + 8] for k in range(100, 140, 8)]
    modules, optimizers, losses = {}, {}, {True: [], False: []}
    for sparse in (True, False):
        module = modules[sparse] = compiled.as_torch(sparse=sparse)
        torch.manual_seed(0)
        module.classifier = torch.nn.Linear(H, 5)
        rest = [p for name, p in module.named_parameters() if name != "emb"]
        optimizers[sparse] = torch.optim.Adagrad([{"params": rest, "weight_decay": 1e-4},
                                                  {"params": [module.emb], "lr": 0.005}], lr=0.05)
    for step, batch in enumerate(batches):
        for sparse in (True, False):
            module, optimizer = modules[sparse], optimizers[sparse]
            optimizer.zero_grad()
            states = torch.cat(module(batch, all_nodes=True))
            loss = torch.nn.functional.cross_entropy(module.classifier(states), _labels(batch))
            loss.backward()
            losses[sparse].append(loss.item())
            if step == 0:
                grad = module.emb.grad
                assert grad.is_sparse == sparse
            optimizer.step()
        if step == 0:
            dense = modules[False].emb.grad
            np.testing.assert_allclose(modules[True].emb.grad.to_dense().numpy(), dense.numpy(), rtol=0, atol=1e-7)
            assert modules[True].emb.grad._nnz() == len(np.unique(np.nonzero(dense.numpy())[0]))
    np.testing.assert_allclose(losses[True], losses[False], rtol=1e-5)
    assert losses[True][-1] < losses[True][0]
    for name in ("emb", "W", "U"):
        np.testing.assert_allclose(modules[True].get_parameter(name).detach().numpy(),
                                   modules[False].get_parameter(name).detach().numpy(), rtol=1e-5, atol=1e-6)


def test_the_compiled_model_reads_the_parameters_memory(sst):
    """No copy per step: the compiled model's weights are the parameters' memory; changed in
    place between a forward and its backward is torch's error, and a non-finite parameter is
    refused by name before the next forward runs anything."""
    trees, vocab = sst
    compiled = ct.models.TreeLSTM(H, len(vocab), embed_size=E, seed=2).compile(training=True)
    module = compiled.as_torch()
    for name, p in module.named_parameters():
        assert np.shares_memory(compiled.training_weights[name], p.detach().numpy()), name
    batch = trees[:5]
    loss = module(batch).sum()
    with torch.no_grad():
        module.U.mul_(0.5)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        loss.backward()
    with torch.no_grad():
        module.W[3, 4] = float("nan")
    with pytest.raises(ValueError, match="weight 'W': contains NaN"):
        module(batch)


def test_sparse_needs_a_training_model_with_an_embedding(setup):
    _, model, _ = setup
    with pytest.raises(ValueError, match="training=True"):
        model.compile().as_torch(sparse=True)
    features = ct.models.TreeLSTM(H, inputs="features", embed_size=E, seed=0).compile(training=True)
    with pytest.raises(ValueError, match="reads no embedding table"):
        features.as_torch(sparse=True)


def test_all_finite():
    a = np.ones((3, 4), np.float32)
    assert all_finite(a) and all_finite(np.full(4, 3e30, np.float32))      # a sum of squares overflows
    for bad in (np.nan, np.inf, -np.inf):
        a[1, 2] = bad
        assert not all_finite(a)
    assert all_finite(np.zeros((0, 3), np.float32))


@pytest.mark.parametrize("make", [lambda V: ct.models.MVRNN(8, V, seed=0),
                                  lambda V: ct.models.TreeLSTM(8, V, seed=0, inner_words=True)],
                         ids=["MVRNN", "inner-words"])
def test_rows_of_every_word_table(sst, make):
    """Two tables per word (MV-RNN's vector and matrix); words on inner nodes too."""
    trees, vocab = sst
    compiled = make(len(vocab)).compile(training=True)
    batch = trees[200:206]
    out, vjp = compiled.vjp(batch)
    dense = {name: g.copy() for name, g in vjp(np.ones_like(out)).items()}
    out, vjp = compiled.vjp(batch)
    got = vjp(np.ones_like(out), word_rows=True)
    for name, rows in vjp.word_rows.items():
        np.testing.assert_array_equal(got[name], dense[name][rows], err_msg=name)
        assert not np.delete(dense[name], rows, axis=0).any(), name


def test_a_pullback_is_freed_when_let_go(setup):
    """No reference cycle keeps a pullback (its saved tensors, the parameters' memory) alive until
    a garbage collection: one at interpreter exit aborted DDP workers (torch torn down first)."""
    trees, _, compiled = setup
    out, vjp = compiled.vjp(trees[:3])
    vjp(np.ones_like(out), word_rows=True)
    gone = weakref.ref(vjp)
    gc.disable()
    try:
        del vjp
        assert gone() is None
    finally:
        gc.enable()
