"""Compiled recursive models inside Relax: `model.as_relax`, and the SST classifier example
(TreeLSTM + Linear(H, 5) + softmax) built with one tvm.compile and run in the VirtualMachine."""
import importlib.util
import os

import numpy as np
import pytest
import tvm
from tvm import relax

import cortex_tvm as ct
from cortex_tvm.relax import RecursiveCall

HERE = os.path.dirname(__file__)
EXAMPLE = os.path.join(HERE, "..", "..", "examples", "sst_classifier.py")
H = 16


def _example():
    spec = importlib.util.spec_from_file_location("sst_classifier", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def sst():
    return ct.data.sst_sample()


def _vm(mod):
    return relax.VirtualMachine(tvm.compile(mod, target=ct.make_target("llvm"), tir_pipeline=ct.TIR_PIPELINE), tvm.cpu())


def test_as_relax_tree_lstm(sst):
    trees, vocab = sst
    model = ct.models.TreeLSTM(hidden_size=H, vocab_size=len(vocab))
    mod, make_inputs = model.as_relax("llvm")
    assert isinstance(mod, tvm.IRModule) and "main" in [gv.name_hint for gv in mod.get_global_vars()]
    assert "call_tir_inplace" in mod["main"].script()
    vm = _vm(mod)
    for batch in (trees[:1], trees[1:41], trees[41:300]):      # dynamic node counts, one build
        got = vm["main"](*make_inputs(batch)).numpy()
        np.testing.assert_allclose(got, model.reference(batch), atol=1e-4, rtol=0)
    # the states are allocated per call: a second run of the same batch gives the same numbers
    again = vm["main"](*make_inputs(trees[41:300])).numpy()
    np.testing.assert_allclose(again, model.reference(trees[41:300]), atol=1e-4, rtol=0)


def test_as_relax_dag_model():
    model = ct.models.DAGRNN(hidden_size=16, vocab_size=50)
    mod, make_inputs = model.as_relax()
    dags = [ct.data.grid_dag(r, c, seed=r * 10 + c, vocab_size=50) for r, c in ((3, 4), (1, 1), (5, 2))]
    got = _vm(mod)["main"](*make_inputs(dags)).numpy()
    np.testing.assert_allclose(got, model.reference(dags), atol=1e-4, rtol=0)


def test_per_level_plan_is_rejected():
    model = ct.models.TreeFC(hidden_size=16, vocab_size=20)
    with pytest.raises(ValueError, match="per-level"):
        RecursiveCall(model, "llvm", schedule=lambda rs: rs.per_level_kernels())


def test_a_compiled_model_or_another_object_is_refused_by_name():
    """as_relax compiles the model's kernel itself: handed what compile() returned, it said
    "'CompiledModel' object has no attribute 'lower'" from deep inside the padding's analysis."""
    model = ct.models.TreeFC(hidden_size=16, vocab_size=20)
    with pytest.raises(TypeError, match="got CompiledModel: pass the model itself, not what its compile"):
        ct.relax.as_relax(model.compile())
    for other, name in ((model.weights, "dict"), ("TreeFC", "str")):
        with pytest.raises(TypeError, match=f"as_relax: expected a model .*got {name}$"):
            RecursiveCall(other, "llvm")


def test_sst_classifier_example(sst):
    ex = _example()
    trees, vocab = sst
    encoder = ct.models.TreeLSTM(hidden_size=H, vocab_size=len(vocab))
    Wc, bc = ex.head_weights(H)
    mod, make_inputs = ex.build_classifier(encoder, Wc, bc, ct.make_target("llvm"))
    vm = _vm(mod)
    batch = trees[:30]
    probs = vm["main"](*make_inputs(batch)).numpy()
    assert probs.shape == (30, 5)
    np.testing.assert_allclose(probs.sum(-1), 1.0, atol=1e-5)
    np.testing.assert_allclose(probs, ex.numpy_classifier(encoder, Wc, bc, batch), atol=1e-4, rtol=0)


def test_sst_classifier_matches_pytorch(sst):
    torch = pytest.importorskip("torch")
    ex = _example()
    trees, vocab = sst
    torch.manual_seed(0)
    enc = {"emb.weight": torch.randn(len(vocab), H), "W.weight": torch.rand(3 * H, H) - 0.5,
           "W.bias": torch.rand(3 * H) - 0.5, "U.weight": torch.rand(5 * H, 2 * H) - 0.5,
           "U.bias": torch.rand(5 * H) - 0.5}
    head = torch.nn.Linear(H, 5)
    encoder = ct.models.TreeLSTM(hidden_size=H, vocab_size=len(vocab)).load_weights(enc)
    mod, make_inputs = ex.build_classifier(encoder, head.weight.detach().numpy(), head.bias.detach().numpy())
    batch = trees[:20]
    probs = _vm(mod)["main"](*make_inputs(batch)).numpy()

    s = torch.sigmoid

    def node(n):                          # binary TreeLSTM in plain torch, by recursion
        if n.is_leaf:
            i, o, u = (enc["W.weight"] @ enc["emb.weight"][n.word] + enc["W.bias"]).split(H)
            c = s(i) * torch.tanh(u)
        else:
            (hl, cl), (hr, cr) = node(n.children[0]), node(n.children[1])
            i, fl, fr, o, u = (enc["U.weight"] @ torch.cat([hl, hr]) + enc["U.bias"]).split(H)
            c = s(i) * torch.tanh(u) + s(fl) * cl + s(fr) * cr
        return s(o) * torch.tanh(c), c
    with torch.no_grad():
        want = torch.softmax(head(torch.stack([node(t)[0] for t in batch])), -1).numpy()
    np.testing.assert_allclose(probs, want, atol=1e-4, rtol=0)


def test_odd_size_is_padded_like_compile_and_sliced_back(sst):
    """H=37 runs as the padded (register-tiled) kernel compile() builds; Relax gets (B, 37)."""
    trees, vocab = sst
    model = ct.models.TreeLSTM(hidden_size=37, vocab_size=len(vocab))
    call = RecursiveCall(model, "llvm")
    assert call.states[0][1] != (37,) and call.visible_shape == (37,)       # the kernel is padded
    mod, make_inputs = model.as_relax("llvm")
    assert "strided_slice" in mod["main"].script()
    got = _vm(mod)["main"](*make_inputs(trees[:25])).numpy()
    assert got.shape == (25, 37)
    np.testing.assert_allclose(got, model.reference(trees[:25]), atol=1e-4, rtol=0)
