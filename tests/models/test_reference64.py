"""`models.reference64`, the per-node float64 reference the bench checks every system against.

It must agree with every zoo model's level-batched numpy executor (float32, so ~1e-5 relative)
on the bundled SST trees and on each model's own structures (n-ary trees with words on inner
nodes, sequences, DAGs), and, to float64 rounding, with the tests' own independent references
(tests/reference.py, tests/models/reference_np.py).  It also shares `numpy_cells.lstm_cell` with no one:
that cell is checked here against its formula.
"""
import numpy as np
import pytest

import reference as tree_ref
import cortex_tvm as ct
from cortex_tvm.bench.cases import OPTIONS, structures
from cortex_tvm.data import Node
from cortex_tvm.models import reference64
from cortex_tvm.models.numpy_cells import lstm_cell, sigmoid

from . import reference_np as ref
from . import trees as tree_gen

V, H = 60, 8
#: float32 executor vs float64 reference: max |diff| <= REL * max(1, max |ref|)
REL = 1e-5


def _model(name, **options):
    return ct.models.BY_NAME[name](hidden_size=H, vocab_size=V, **{**OPTIONS.get(name, {}), **options})


def _close(got, want, rel=REL):
    err = float(np.abs(np.asarray(got, np.float64) - want).max())
    assert err <= rel * max(1.0, float(np.abs(want).max())), err


def _dags():
    src = Node(word=3)
    mid = Node(word=4, children=[src])
    no_word = Node(children=[src])                        # x = 0 at a DAG node without a word
    return [ct.data.grid_dag(4, 5, seed=1, vocab_size=V), ct.data.grid_dag(1, 1, seed=2, vocab_size=V),
            ct.data.grid_dag(6, 3, seed=4, vocab_size=V), Node(word=5, children=[mid, mid, no_word])]


#: each model's own structures, beyond the SST sample: (constructor options, structures)
OWN = {
    "treelstm": ({"inner_words": True}, lambda: tree_gen.nary_trees(30, 2, 3, V, word_prob=0.4)),
    "treefc": ({}, lambda: tree_gen.nary_trees(30, 2, 4, V)),          # one-child nodes read the null node
    "treegru": ({}, lambda: tree_gen.nary_trees(30, 2, 5, V)),
    "childsum": ({"inner_words": True}, lambda: tree_gen.nary_trees(30, 4, 6, V, word_prob=0.5)),
    "mvrnn": ({}, lambda: tree_gen.nary_trees(30, 2, 7, V)),
    "dagrnn": ({"max_predecessors": 3}, _dags),
    "seqlstm": ({}, lambda: ct.data.sequences(tree_gen.word_lists(30, 8, V))),
    "seqgru": ({}, lambda: ct.data.sequences(tree_gen.word_lists(30, 9, V))),
}


@pytest.mark.parametrize("name", sorted(ct.models.BY_NAME))
def test_agrees_with_numpy_executor_on_sst(name):
    model = _model(name)
    batch = structures(name, tree_gen.sst(80, V))          # the bench's structures for SST sentences
    got = reference64(model, batch)
    assert got.dtype == np.float64 and got.shape == (80, H)
    _close(model.reference(batch), got)


@pytest.mark.parametrize("name", sorted(OWN))
def test_agrees_with_numpy_executor_on_own_structures(name):
    options, make = OWN[name]
    model = _model(name, **options)
    batch = make()
    _close(model.reference(batch), reference64(model, batch))


def _last_states(per_structure):
    return np.stack([states[-1] for states in per_structure])


#: name -> (options, structures, the tests' own reference: (structures, weights) -> roots)
INDEPENDENT = {
    "treefc": ({}, lambda: tree_gen.sst(40, V), lambda s, w: tree_ref.roots("TreeFC", s, w)),
    "treelstm": ({"inner_words": True}, OWN["treelstm"][1], lambda s, w: tree_ref.roots("TreeLSTM", s, w)),
    "treegru": ({}, lambda: tree_gen.sst(40, V), lambda s, w: _last_states(ref.tree_gru(s, w))),
    "childsum": ({"inner_words": True}, OWN["childsum"][1],
                 lambda s, w: _last_states(ref.child_sum_tree_lstm(s, w))),
    "mvrnn": ({}, lambda: tree_gen.sst(40, V), lambda s, w: _last_states(ref.mv_rnn(s, w))),
    "dagrnn": ({"max_predecessors": 3}, _dags, lambda s, w: _last_states(ref.dag_rnn(s, w))),
}


@pytest.mark.parametrize("name", sorted(INDEPENDENT))
def test_agrees_with_the_tests_own_references(name):
    options, make, other = INDEPENDENT[name]
    model = _model(name, **options)
    batch = make()
    _close(reference64(model, batch), other(batch, model.weights), rel=1e-12)


@pytest.mark.parametrize("name, other", [("seqlstm", ref.seq_lstm_last), ("seqgru", ref.seq_gru_last)])
def test_sequences_agree_with_a_plain_loop(name, other):
    model = _model(name)
    words = tree_gen.word_lists(20, 11, V)
    _close(reference64(model, ct.data.sequences(words)), other(words, model.weights), rel=1e-12)


def test_deep_chain_no_recursion_limit():
    model = _model("seqgru")
    seq = ct.data.sequence(list(np.random.default_rng(0).integers(0, V, 3000)))
    _close(model.reference([seq]), reference64(model, [seq]))


def test_bad_structures_are_errors():
    fc = _model("treefc")
    a, b = Node(word=1), Node(word=2)
    loop = Node(children=[a, b])
    a.children = [loop]
    a.word = None
    with pytest.raises(ValueError, match="cycle"):
        reference64(fc, [loop])
    with pytest.raises(ValueError, match="reads words only at leaves"):
        reference64(fc, [Node(word=3, children=[Node(word=1), Node(word=2)])])
    with pytest.raises(ValueError, match="more than 2"):
        reference64(fc, [Node(children=[Node(word=1), Node(word=2), Node(word=3)])])
    with pytest.raises(ValueError, match="vocabulary"):
        reference64(fc, [Node(word=V)])
    with pytest.raises(TypeError, match="not a Node"):
        reference64(fc, [3])
    class Unknown(ct.models.Model):
        def weight_shapes(self):
            return {}
    with pytest.raises(TypeError, match="no float64 reference"):
        reference64(Unknown(), [Node(word=1)])


def test_lstm_cell_is_its_formula():
    rng = np.random.default_rng(0)
    i, o, u = (rng.standard_normal((5, 4)) for _ in range(3))
    f, cells = rng.standard_normal((5, 3, 4)), rng.standard_normal((5, 3, 4))
    h, c = lstm_cell(i, o, u, f, cells)
    want_c = sigmoid(i) * np.tanh(u) + sum(sigmoid(f[:, k]) * cells[:, k] for k in range(3))
    np.testing.assert_allclose(c, want_c, rtol=1e-12)
    np.testing.assert_allclose(h, sigmoid(o) * np.tanh(want_c), rtol=1e-12)
    h0, c0 = lstm_cell(i, o, u)
    np.testing.assert_allclose(c0, sigmoid(i) * np.tanh(u), rtol=1e-12)
    np.testing.assert_allclose(h0, sigmoid(o) * np.tanh(c0), rtol=1e-12)
