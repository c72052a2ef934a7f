"""The new zoo models (TreeGRU, ChildSumTreeLSTM, MVRNN, DAGRNN, SeqLSTM, SeqGRU), compiled with
their default schedule, against an independent float64 numpy reference (always) and plain
PyTorch modules whose state_dicts are loaded through the models' aliases (when torch is installed).
Each model is compiled once per module (H small: the file runs in well under 30 s)."""
import numpy as np
import pytest

import cortex_tvm as ct
from cortex_tvm.data import Node, dag_postorder

from . import reference_np as ref
from . import trees as tree_gen

TOL = 1e-4
V = 60


def _nary_trees(count, max_children, seed):
    return tree_gen.nary_trees(count, max_children, seed, V, max_leaves=30)


def _sst(count):
    return tree_gen.sst(count, V)


def _word_lists(count, seed, max_len=25):
    return tree_gen.word_lists(count, seed, V, max_len)


def _dags():
    """Grid DAGs of several sizes plus a diamond whose shared node is listed twice by one parent."""
    src = Node(word=3)
    mid = Node(word=4, children=[src])
    no_word = Node(children=[src])                       # x = 0 at a DAG node without a word
    diamond = Node(word=5, children=[mid, mid, no_word])
    return [ct.data.grid_dag(4, 5, seed=1, vocab_size=V), ct.data.grid_dag(1, 1, seed=2, vocab_size=V),
            ct.data.grid_dag(2, 7, seed=3, vocab_size=V), ct.data.grid_dag(6, 3, seed=4, vocab_size=V), diamond]


SPECS = {
    # name: (constructor, structures() -> (structures, reference input), numpy reference, H)
    "TreeGRU": (lambda: ct.models.TreeGRU(16, V), lambda: (lambda s: (s, s))(_sst(60)), ref.tree_gru),
    "ChildSumTreeLSTM": (lambda: ct.models.ChildSumTreeLSTM(16, V, max_children=4),
                         lambda: (lambda s: (s, s))(_nary_trees(40, 4, 7)), ref.child_sum_tree_lstm),
    "MVRNN": (lambda: ct.models.MVRNN(8, V), lambda: (lambda s: (s, s))(_sst(60)), ref.mv_rnn),
    "DAGRNN": (lambda: ct.models.DAGRNN(16, V, max_predecessors=3),
               lambda: (lambda s: (s, s))(_dags()), ref.dag_rnn),
    "SeqLSTM": (lambda: ct.models.SeqLSTM(8, V), lambda: (lambda w: (ct.data.sequences(w), w))(_word_lists(30, 5)),
                ref.seq_lstm_last),
    "SeqGRU": (lambda: ct.models.SeqGRU(16, V), lambda: (lambda w: (ct.data.sequences(w), w))(_word_lists(30, 6)),
               ref.seq_gru_last),
}


def _torch_module(name, model):
    """The PyTorch reference for `model`'s sizes, or None without torch."""
    try:
        import torch
    except ImportError:
        return None
    from . import reference_torch
    torch.manual_seed(0)
    return getattr(reference_torch, name)(V, model.hidden_size)


class Case:
    def __init__(self, name):
        make, structures, self.reference = SPECS[name]
        self.name, self.model = name, make()
        self.torch = _torch_module(name, self.model)
        if self.torch is not None:        # compile with the reference module's weights
            self.model.load_weights(self.torch.state_dict())
        self.structures, self.ref_input = structures()
        self.compiled = self.model.compile()
        self.weights = {k: v.copy() for k, v in self.model.weights.items()}

    def want_roots(self):
        got = self.reference(self.ref_input, self.weights)
        return got if isinstance(got, np.ndarray) else np.stack([r[-1] for r in got])


@pytest.fixture(scope="module", params=list(SPECS))
def case(request):
    return Case(request.param)


def assert_close(got, want, tol=TOL):
    got = np.asarray(got)
    assert got.dtype == np.float32 and got.shape == np.shape(want), (got.dtype, got.shape, np.shape(want))
    err = float(np.max(np.abs(got.astype(np.float64) - want)))
    assert err <= tol, f"max abs diff {err:g} > {tol:g}"


def test_exported():
    for name in SPECS:
        assert name in ct.models.__all__ and issubclass(getattr(ct.models, name), ct.models.Model)


def test_roots_match_numpy_reference(case):
    assert_close(case.compiled(case.structures), case.want_roots())


def test_numpy_forward_matches_reference(case):
    assert_close(case.model.reference(case.structures), case.want_roots())


def test_all_nodes(case):
    if case.name.startswith("Seq"):
        # every prefix's final h is the state of that element
        words = case.ref_input[0]
        per_node = case.compiled([ct.data.sequence(words)], all_nodes=True)[0]
        positions = ct.data.sequence_positions(len(words))
        want = case.reference([words[:t] for t in range(1, len(words) + 1)], case.weights)
        assert_close(per_node[positions], want)
        return
    got = case.compiled(case.structures, all_nodes=True)
    want = case.reference(case.ref_input, case.weights)
    assert len(got) == len(want)
    for g, w, s in zip(got, want, case.structures):
        assert len(g) == len(dag_postorder(s))
        assert_close(g, w)


def test_matches_pytorch(case):
    torch = pytest.importorskip("torch")
    with torch.no_grad():
        want = case.torch(case.ref_input).double().numpy()
    assert_close(case.compiled(case.structures), want)


def test_aliases_load_state_dict(case):
    pytest.importorskip("torch")
    sd = case.torch.state_dict()
    assert set(case.model.aliases.get(k, k) for k in sd) == set(case.model.weight_shapes())
    for k, v in sd.items():
        np.testing.assert_array_equal(case.weights[case.model.aliases.get(k, k)], v.numpy())


def test_flops_positive(case):
    lin = case.model.linearize(case.structures)
    assert case.model.flops(lin) > 0


def test_weight_docstring_shapes(case):
    """Every weight named in weight_shapes appears in the class docstring (the documented layout)."""
    doc = type(case.model).__doc__
    for name in case.model.weight_shapes():
        assert f"`{name} (" in doc or f"`{name}" in doc, name
