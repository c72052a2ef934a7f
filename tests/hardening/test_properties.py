"""Property tests: compiled models vs the independent float64 numpy references
(tests/reference.py, tests/models/reference_np.py) on generated structures, for the
default schedule and every shipped recipe that applies to the model on llvm.
Each (model, recipe) is compiled once per module."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import cortex_tvm as ct
from cortex_tvm.data import Node, chain_tree, postorder, random_trees

import reference as ref
from models import reference_np as refnp

H, V, TOL = 16, 64, 1e-4
SETTINGS = settings(max_examples=12, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def _recipes_for(model_name):
    """[None (default), then every other recipe that applies to the model on llvm]."""
    out = [None]
    shipped = ct.recipes.shipped()
    for name in ct.recipes.names():
        r = shipped[name]
        if name in ("none", "auto") or (r.model == model_name and r.target in ("llvm", "*")):
            out.append(name)
    return out


_MODELS = {
    "TreeFC": lambda: ct.models.TreeFC(hidden_size=H, vocab_size=V),
    "TreeLSTM": lambda: ct.models.TreeLSTM(hidden_size=H, vocab_size=V),
    "ChildSumTreeLSTM": lambda: ct.models.ChildSumTreeLSTM(hidden_size=H, vocab_size=V, max_children=4),
    "DAGRNN": lambda: ct.models.DAGRNN(hidden_size=H, vocab_size=V, max_predecessors=2),
    "SeqLSTM": lambda: ct.models.SeqLSTM(hidden_size=H, vocab_size=V),
}
_compiled = {}


def compiled(name, schedule):
    """(model, compiled) built once per module (a recipe equal to the default hits the build cache)."""
    if (name, schedule) not in _compiled:
        model = _MODELS[name]()
        _compiled[name, schedule] = (model, model.compile(target="llvm", schedule=schedule))
    return _compiled[name, schedule]


def cases(name):
    return [pytest.param(name, s, id=f"{name}-{s or 'default'}") for s in _recipes_for(name)]


def assert_close(got, want, tol=TOL):
    got = np.asarray(got)
    assert got.dtype == np.float32 and got.shape == np.shape(want), (got.shape, np.shape(want))
    err = float(np.max(np.abs(got.astype(np.float64) - want))) if got.size else 0.0
    assert err <= tol, f"max abs diff {err:g} > {tol:g}"


# ------------------------------------------------------------------ strategies
words = st.integers(0, V - 1)
leaves = st.builds(lambda w: Node(word=w), words)


def nary_trees(max_children, max_leaves=24, inner_words=False):
    """Random trees; with inner_words, an inner node has a word or not (dependency-style)."""
    inner_word = st.one_of(st.none(), words) if inner_words else st.none()
    return st.recursive(leaves, lambda kids: st.tuples(st.lists(kids, min_size=1, max_size=max_children), inner_word)
                        .map(lambda cw: Node(word=cw[1], children=cw[0])), max_leaves=max_leaves)


binary_trees = nary_trees(2)
batches = st.lists(binary_trees, min_size=1, max_size=6)


@st.composite
def dags(draw, max_preds=2):
    """A random DAG in DAG-RNN form: node i = Node(word=w, children=preds) with distinct
    earlier nodes as preds (shared by several successors), or a leaf when it has none."""
    n = draw(st.integers(1, 14))
    nodes = []
    for i in range(n):
        k = draw(st.integers(0, min(max_preds, i)))
        preds = draw(st.lists(st.integers(0, i - 1), min_size=k, max_size=k, unique=True)) if k else []
        w = draw(words)
        nodes.append(Node(word=w, children=[nodes[p] for p in preds]) if preds else Node(word=w))
    return nodes[-1]


# ------------------------------------------------------------------ properties
@pytest.mark.parametrize("name,schedule", cases("TreeFC") + cases("TreeLSTM"))
@SETTINGS
@given(batch=batches)
def test_binary_trees_match_reference(name, schedule, batch):
    model, c = compiled(name, schedule)
    assert_close(c(batch), ref.roots(name, batch, model.weights))


@pytest.mark.parametrize("name,schedule", cases("TreeFC") + cases("TreeLSTM"))
@SETTINGS
@given(batch=st.lists(leaves, min_size=1, max_size=5))
def test_single_nodes_match_reference(name, schedule, batch):
    model, c = compiled(name, schedule)
    assert_close(c(batch), ref.roots(name, batch, model.weights))


@pytest.mark.parametrize("name,schedule", cases("ChildSumTreeLSTM"))
@SETTINGS
@given(data=st.data())
def test_nary_trees_match_reference(name, schedule, data):
    model, c = compiled(name, schedule)
    batch = data.draw(st.lists(nary_trees(model.max_children, inner_words=True), min_size=1, max_size=5))
    want = np.stack([h[-1] for h in refnp.child_sum_tree_lstm(batch, model.weights)])
    assert_close(c(batch), want)


@pytest.mark.parametrize("name,schedule", cases("DAGRNN"))
@SETTINGS
@given(batch=st.lists(dags(), min_size=1, max_size=4))
def test_dags_match_reference(name, schedule, batch):
    model, c = compiled(name, schedule)
    want = np.stack([h[-1] for h in refnp.dag_rnn(batch, model.weights)])
    assert_close(c(batch), want)


@pytest.mark.parametrize("name,schedule", cases("SeqLSTM"))
@SETTINGS
@given(word_lists=st.lists(st.lists(words, min_size=1, max_size=20), min_size=1, max_size=5))
def test_sequences_match_reference(name, schedule, word_lists):
    model, c = compiled(name, schedule)
    assert_close(c(ct.data.sequences(word_lists)), refnp.seq_lstm_last(word_lists, model.weights))


# ------------------------------------------------------------------ big structures (plain tests)
@pytest.mark.parametrize("name", ["TreeFC", "TreeLSTM"])
def test_chain_10000_deep(name):
    model, c = compiled(name, None)
    tree = chain_tree(10000, seed=3, vocab_size=V)
    per_node = c([tree], all_nodes=True)[0]
    want = ref.all_h(name, [tree], model.weights)[0]
    assert per_node.shape == (20001, H)
    assert_close(per_node, want)


@pytest.mark.parametrize("name", ["TreeFC", "TreeLSTM"])
def test_batch_of_100000_nodes(name):
    model, c = compiled(name, None)
    trees = random_trees(1000, (40, 60), seed=11, vocab_size=V)
    total = sum(len(postorder(t)) for t in trees)
    assert total >= 80_000
    got = c(trees)
    assert_close(got, model.reference(trees), tol=TOL)
    spots = [0, 17, 500, 999]
    assert_close(got[spots], ref.roots(name, [trees[i] for i in spots], model.weights))


@pytest.mark.parametrize("name", ["TreeFC", "TreeLSTM"])
def test_tiny_and_huge_trees_in_one_batch(name):
    model, c = compiled(name, None)
    big = random_trees(1, 5000, seed=5, vocab_size=V)[0]
    trees = [Node(word=1), chain_tree(3000, seed=2, vocab_size=V), Node(children=[Node(word=2)]), big,
             Node(word=V - 1)] + random_trees(20, (1, 4), seed=6, vocab_size=V)
    assert_close(c(trees), ref.roots(name, trees, model.weights))
