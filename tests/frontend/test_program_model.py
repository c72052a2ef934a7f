"""A hand-written RA program as a model: `ct.compile(program, weights)` / `ProgramModel`, and a
`ct.models.Model` subclass that sets no sizes (the README's two RA paths)."""
import numpy as np
import pytest

import cortex_tvm as ct

H = 16


def _tree_fc(V):
    """A hand-built RA program (the README's TreeFC, as the zoo class builds it with ra.*)."""
    return ct.models.TreeFC(hidden_size=H, vocab_size=V).build_program()


class SizelessFC(ct.models.Model):
    """TreeFC written as the README says, without hidden_size or vocab_size attributes."""

    V = 0

    def weight_shapes(self):
        return {"emb": (self.V, H), "W": (H, H), "b": (H,)}

    def build_program(self):
        return _tree_fc(self.V)

    def numpy_forward(self, lin):
        w, lo = self.weights, lin.level_offsets
        out = np.zeros((lin.num_slots, H), np.float32)
        out[lo[0]:lo[1]] = w["emb"][lin.words[lo[0]:lo[1]]]
        for s, e in zip(lo[1:-1], lo[2:]):
            kids = lin.children[s:e]
            out[s:e] = np.tanh((out[kids[:, 0]] + out[kids[:, 1]]) @ w["W"].T + w["b"])
        return [out]


@pytest.fixture(scope="module")
def sst():
    trees, vocab = ct.data.sst_sample()
    return trees[:12], len(vocab)


@pytest.fixture(scope="module")
def zoo_fc(sst):
    return ct.models.TreeFC(hidden_size=H, vocab_size=sst[1])


def test_compile_a_program(sst, zoo_fc):
    trees, V = sst
    compiled = ct.compile(_tree_fc(V), weights=zoo_fc.weights)
    np.testing.assert_allclose(compiled(trees), ct.models.reference64(zoo_fc, trees), atol=1e-5)
    model = ct.models.ProgramModel(_tree_fc(V), zoo_fc.weights)
    assert model.hidden_size == H and model.vocab_bound == V and model.weight_shapes()["emb"] == (V, H)
    with pytest.raises(ValueError, match="outside the vocabulary"):
        compiled([ct.data.Node(children=[ct.data.Node(word=V), ct.data.Node(word=0)])])
    with pytest.raises(NotImplementedError, match="no numpy executor"):
        model.reference(trees)


def test_program_model_errors(sst, zoo_fc):
    trees, V = sst
    with pytest.raises(TypeError, match="expected an ra.RecProgram"):
        ct.models.ProgramModel("not a program", zoo_fc.weights)
    with pytest.raises(ValueError, match="W"):
        ct.compile(_tree_fc(V), weights={**zoo_fc.weights, "W": np.zeros((H, H + 1), np.float32)})
    with pytest.raises(ValueError, match="missing|b"):
        ct.compile(_tree_fc(V), weights={k: v for k, v in zoo_fc.weights.items() if k != "b"})


def test_a_subclass_that_sets_no_sizes_compiles(sst, zoo_fc):
    trees, V = sst
    SizelessFC.V = V
    model = SizelessFC().load_weights(zoo_fc.weights)
    assert "hidden_size" not in vars(model) and model.hidden_size == H and model.vocab_bound == V
    compiled = model.compile()
    np.testing.assert_allclose(compiled(trees), model.reference(trees), atol=1e-5)
    np.testing.assert_allclose(compiled(trees), ct.models.reference64(zoo_fc, trees), atol=1e-5)
    with pytest.raises(ValueError, match="outside the vocabulary"):       # bounded by the program's input
        compiled([ct.data.Node(children=[ct.data.Node(word=V), ct.data.Node(word=0)])])
    with pytest.raises(AttributeError, match="no attribute 'vocab_size'"):
        model.vocab_size
