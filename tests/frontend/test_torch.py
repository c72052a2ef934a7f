"""compiled.as_torch(): a torch.nn.Module returning torch tensors that share the kernel's output.

Needs torch (the [test] extra installs it); the ImportError without it is checked by hiding it.
"""
import numpy as np
import pytest

import cortex_tvm as ct

from . import cells

H, V = 16, 40
TREES = ct.data.random_trees(9, (1, 30), seed=5, vocab_size=V)


@pytest.fixture(scope="module")
def compiled():
    zoo = ct.models.TreeLSTM(hidden_size=H, vocab_size=V, seed=3)
    return zoo, ct.compile(cells.tree_lstm, weights=zoo.weights, max_children=2)


def test_as_torch_without_torch_says_how_to_get_it(compiled, monkeypatch):
    """Run everywhere: with torch installed, `import torch` is made to fail (None in sys.modules)."""
    import sys

    from cortex_tvm import torch_interop
    monkeypatch.setitem(sys.modules, "torch", None)
    monkeypatch.setattr(torch_interop, "_CLASS", None)      # the module class made by an earlier test
    with pytest.raises(ImportError, match="pip install torch"):
        compiled[1].as_torch()


def test_as_torch_forward_equals_compiled(compiled):
    torch = pytest.importorskip("torch")
    zoo, model = compiled
    module = model.as_torch()
    assert isinstance(module, torch.nn.Module)
    out = module(TREES)
    assert isinstance(out, torch.Tensor) and out.dtype == torch.float32 and tuple(out.shape) == (len(TREES), H)
    assert not out.requires_grad
    np.testing.assert_array_equal(out.numpy(), model(TREES))
    np.testing.assert_allclose(out.numpy(), zoo.reference(TREES), atol=1e-5, rtol=0)


def test_to_torch_shares_memory_and_copies_only_what_it_must():
    torch = pytest.importorskip("torch")
    from cortex_tvm.torch_interop import to_torch
    array = np.arange(12, dtype=np.float32).reshape(3, 4)
    shared = to_torch(array)
    array[0, 0] = 42.0                       # the tensor sees it: same memory, no copy
    assert shared[0, 0].item() == 42.0 and shared.data_ptr() == array.ctypes.data
    strided = to_torch(array[:, ::2])        # not contiguous: copied (DLPack would refuse or alias)
    assert torch.equal(strided, torch.tensor(array[:, ::2]))


def test_as_torch_inside_a_torch_model(compiled):
    """The module composes with torch layers: a tree classifier, the compiled TreeLSTM encoder
    (frozen) under a trainable Linear head."""
    torch = pytest.importorskip("torch")
    zoo, model = compiled
    torch.manual_seed(0)
    encoder, head = model.as_torch(), torch.nn.Linear(H, 5)
    logits = head(encoder(TREES))
    expected = zoo.reference(TREES) @ head.weight.detach().numpy().T + head.bias.detach().numpy()
    np.testing.assert_allclose(logits.detach().numpy(), expected, atol=1e-5, rtol=0)
    logits.sum().backward()                  # gradients reach the torch head, not the compiled encoder
    assert head.weight.grad is not None
    assert "TracedModel" in repr(encoder)


def test_weights_given_as_torch_tensors(compiled):
    torch = pytest.importorskip("torch")
    zoo, model = compiled
    again = ct.compile(cells.tree_lstm, weights={k: torch.from_numpy(v) for k, v in zoo.weights.items()})
    np.testing.assert_array_equal(again(TREES), model(TREES))


def test_as_torch_says_it_is_inference_only_and_what_to_do_instead(compiled, tmp_path):
    torch = pytest.importorskip("torch")
    zoo, model = compiled
    said = "inference only.*no parameters.*no gradient.*compile the model with training=True"
    with pytest.warns(UserWarning, match=said):
        module = model.as_torch()
    assert list(module.parameters()) == [] and "inference only" in repr(module)
    per_tree = module(TREES[:3], all_nodes=True)          # every node's state, one tensor per tree
    want = model(TREES[:3], all_nodes=True)
    assert [tuple(t.shape) for t in per_tree] == [w.shape for w in want]
    for got, w in zip(per_tree, want):
        np.testing.assert_array_equal(got.numpy(), w)
    with pytest.raises(TypeError, match="compiled.export"):
        torch.save(module, tmp_path / "m.pt")
