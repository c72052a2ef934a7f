"""Words on inner nodes: ChildSumTreeLSTM as the Dependency Tree-LSTM (x = emb[word] at every node
that has a word, 0 elsewhere) and TreeLSTM(inner_words=True), against independent float64 numpy
references (always) and plain PyTorch modules (when torch is importable)."""
import json
import os

import numpy as np
import pytest

import cortex_tvm as ct
from cortex_tvm.data import Node, postorder

import reference as tree_ref
from . import reference_np as ref
from . import trees as tree_gen

TOL = 1e-4
V = 40


def _random_dependency_trees(count, max_children, seed, word_prob=0.6):
    """Random n-ary trees whose inner nodes have a word with probability word_prob."""
    return tree_gen.nary_trees(count, max_children, seed, V, word_prob=word_prob)


def _torch(name, model):
    torch = pytest.importorskip("torch")
    from . import reference_torch
    torch.manual_seed(0)
    module = getattr(reference_torch, name)(model.vocab_size, model.hidden_size)
    model.load_weights(module.state_dict())
    return torch, module


def _assert_close(got, want, tol=TOL):
    got = np.asarray(got)
    assert got.dtype == np.float32 and got.shape == np.shape(want)
    err = float(np.max(np.abs(got.astype(np.float64) - want)))
    assert err <= tol, f"max abs diff {err:g} > {tol:g}"


@pytest.fixture(scope="module")
def sample():
    return ct.data.conllu_sample()


@pytest.fixture(scope="module")
def childsum(sample):
    model = ct.models.ChildSumTreeLSTM(16, len(sample[1]), max_children=6)
    return model, model.compile()


def test_child_sum_on_conllu_sample(childsum, sample):
    model, compiled = childsum
    trees = sample[0]
    want_states = ref.child_sum_tree_lstm(trees, model.weights)     # per tree: h of every node
    _assert_close(compiled(trees), np.stack([s[-1] for s in want_states]))
    got_all = compiled(trees, all_nodes=True)
    for got, states in zip(got_all, want_states):
        _assert_close(got, states)
    _assert_close(model.reference(trees), np.stack([s[-1] for s in want_states]))


def test_child_sum_x_acts_at_inner_nodes(childsum, sample):
    """The word of an inner node changes its state (W_iou, W_f act); removing it gives x = 0."""
    model, compiled = childsum
    a = Node(word=3, children=[Node(word=1), Node(word=2)])
    b = Node(word=4, children=[Node(word=1), Node(word=2)])
    c = Node(children=[Node(word=1), Node(word=2)])
    ha, hb, hc = compiled([a, b, c])
    assert np.abs(ha - hb).max() > 1e-3 and np.abs(ha - hc).max() > 1e-3
    _assert_close(compiled([c]), ref.child_sum_tree_lstm([c], model.weights)[0][-1:])


@pytest.mark.parametrize("schedule", [None, "none"])
def test_child_sum_random_dependency_trees(schedule):
    model = ct.models.ChildSumTreeLSTM(16, V, max_children=4)
    trees = _random_dependency_trees(30, 4, seed=1)
    want = np.stack([s[-1] for s in ref.child_sum_tree_lstm(trees, model.weights)])
    _assert_close(model.compile(schedule=schedule)(trees), want)


def test_child_sum_matches_pytorch(sample):
    model = ct.models.ChildSumTreeLSTM(16, len(sample[1]), max_children=6)
    torch, module = _torch("ChildSumTreeLSTM", model)
    trees = sample[0] + _random_dependency_trees(10, 4, seed=2)
    with torch.no_grad():
        want = module(trees).double().numpy()
    _assert_close(model.compile()(trees), want)


def test_child_sum_unchanged_without_inner_words():
    """Constituency trees: the Dependency Tree-LSTM program and the leaves-only one agree exactly."""
    trees = _random_dependency_trees(30, 4, seed=3, word_prob=0.0)
    full = ct.models.ChildSumTreeLSTM(16, V, max_children=4)
    leaves_only = ct.models.ChildSumTreeLSTM(16, V, max_children=4, inner_words=False)
    np.testing.assert_array_equal(full.compile()(trees), leaves_only.compile()(trees))
    with pytest.raises(ValueError, match="reads words only at leaves"):
        leaves_only.compile()(_random_dependency_trees(3, 4, seed=4, word_prob=1.0))


@pytest.mark.parametrize("schedule", [None, "none"])
def test_tree_lstm_inner_words(schedule):
    model = ct.models.TreeLSTM(16, V, inner_words=True)
    trees = _random_dependency_trees(30, 2, seed=5)               # unary nodes and words on inner nodes
    assert any(n.word is not None and n.children for t in trees for n in postorder(t))
    got = model.compile(schedule=schedule)(trees, all_nodes=True)
    for g, w in zip(got, tree_ref.tree_lstm(trees, model.weights)[0]):
        _assert_close(g, w)


@pytest.mark.parametrize("schedule", [None, "treelstm_llvm"])
def test_tree_lstm_inner_words_at_h64(schedule):
    """At H=64 the model's own schedules apply; the shipped recipe hoists the leaf tables and packs
    W, which inner nodes with a word read too."""
    model = ct.models.TreeLSTM(64, V, inner_words=True)
    compiled = model.compile(schedule=schedule)
    if schedule == "treelstm_llvm":
        assert compiled.plan.hoisted and "W" in {p[0] for p in compiled.plan.packs}
    trees = _random_dependency_trees(30, 2, seed=8)
    _assert_close(compiled(trees), np.stack([h[-1] for h in tree_ref.tree_lstm(trees, model.weights)[0]]))


def test_tree_lstm_inner_words_matches_pytorch():
    model = ct.models.TreeLSTM(16, V, inner_words=True)
    torch, module = _torch("TreeLSTM", model)
    trees = _random_dependency_trees(20, 2, seed=6)
    with torch.no_grad():
        want = module(trees).double().numpy()
    _assert_close(model.compile()(trees), want)


def test_tree_lstm_default_unchanged_and_rejects_inner_words():
    trees = _random_dependency_trees(20, 2, seed=7, word_prob=0.0)
    plain, inner = ct.models.TreeLSTM(16, V), ct.models.TreeLSTM(16, V, inner_words=True)
    np.testing.assert_array_equal(plain.compile()(trees), inner.compile()(trees))
    with pytest.raises(ValueError, match="tree 0: a node has both a word and children"):
        plain.compile()([Node(word=1, children=[Node(word=2)])])


def test_export_keeps_the_no_word_marker(childsum, sample, tmp_path):
    model, compiled = childsum
    path = compiled.export(tmp_path / "dep")
    meta = json.load(open(os.path.join(path, "meta.json"), encoding="utf-8"))
    assert meta["signature"]["node_inputs"] == [["word", len(sample[1]), len(sample[1])]]
    loaded = ct.load(path)
    np.testing.assert_array_equal(loaded(sample[0]), compiled(sample[0]))
    with pytest.raises(ValueError, match="outside the vocabulary"):
        loaded([Node(word=len(sample[1]), children=[Node(word=0)])])      # the marker is no word id


def test_bounds_check_accepts_the_marker(sample):
    model = ct.models.ChildSumTreeLSTM(8, len(sample[1]), max_children=6)
    compiled = model.compile(bounds_check=True)
    _assert_close(compiled(sample[0]), np.stack([s[-1] for s in ref.child_sum_tree_lstm(sample[0], model.weights)]))


def test_dependency_example_matches_its_references():
    """examples/dependency_treelstm.py: numpy always, PyTorch when importable."""
    import importlib.util
    import pathlib
    path = pathlib.Path(__file__).resolve().parents[2] / "examples" / "dependency_treelstm.py"
    spec = importlib.util.spec_from_file_location("dependency_treelstm", path)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    diffs = example.run(hidden=16)
    assert diffs["numpy"] <= example.TOLERANCE
    pytest.importorskip("torch", reason="the PyTorch half of the example needs torch (the [test] extra has it)")
    assert diffs["pytorch"] <= example.TOLERANCE
