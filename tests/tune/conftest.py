"""Small models for the tuner's tests (TVM_NUM_THREADS is set by tests/conftest.py)."""
import pytest

import cortex_tvm as ct

VOCAB = 50


@pytest.fixture(scope="module")
def fc32():
    return ct.models.TreeFC(hidden_size=32, vocab_size=VOCAB)


@pytest.fixture(scope="module")
def trees():
    return ct.data.random_trees(40, (2, 12), seed=1, vocab_size=VOCAB)
