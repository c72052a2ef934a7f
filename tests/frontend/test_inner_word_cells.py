"""`node.word` at inner nodes in a traced cell: the Dependency Tree-LSTM written as a plain
function equals the zoo's ChildSumTreeLSTM and an independent float64 reference, on the bundled
CoNLL-U sample (a word on every node) and on trees whose inner nodes have a word or not."""
import numpy as np
import pytest

import cortex_tvm as ct
from cortex_tvm.frontend import TracedModel

from models import reference_np
from models import trees as tree_gen
from . import cells

H, K = 16, 6


@pytest.fixture(scope="module")
def sample():
    return ct.data.conllu_sample()


@pytest.fixture(scope="module")
def zoo(sample):
    return ct.models.ChildSumTreeLSTM(H, len(sample[1]), max_children=K)


@pytest.fixture(scope="module")
def compiled(zoo):
    return ct.compile(cells.dependency_lstm, weights=zoo.weights, max_children=K)


def test_the_traced_model_reads_words_at_inner_nodes(zoo):
    model = TracedModel(cells.dependency_lstm, zoo.weights, K)
    assert model.reads_inner_words and model.no_word == zoo.vocab_size
    assert not TracedModel(cells.child_sum_lstm, {k: v for k, v in zoo.weights.items() if k != "W_f"},
                           K).reads_inner_words


def test_matches_the_zoo_and_a_float64_reference_on_conllu(compiled, zoo, sample):
    trees = sample[0]
    want = np.stack([states[-1] for states in reference_np.child_sum_tree_lstm(trees, zoo.weights)])
    np.testing.assert_allclose(compiled(trees), want, atol=1e-4, rtol=0)
    np.testing.assert_allclose(compiled(trees), zoo.compile()(trees), atol=1e-5, rtol=0)


def test_inner_nodes_without_a_word_read_zeros(compiled, zoo):
    trees = tree_gen.nary_trees(30, K, seed=3, vocab=zoo.vocab_size, word_prob=0.5)
    assert any(n.word is None and n.children for t in trees for n in ct.data.postorder(t))
    want = np.stack([states[-1] for states in reference_np.child_sum_tree_lstm(trees, zoo.weights)])
    np.testing.assert_allclose(compiled(trees), want, atol=1e-4, rtol=0)
    traced = TracedModel(cells.dependency_lstm, zoo.weights, K)
    np.testing.assert_allclose(traced.reference(trees), want, atol=1e-4, rtol=0)
