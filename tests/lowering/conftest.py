"""The lowered TreeLSTM and TreeFC the lowering tests inspect: lowered once for the whole folder
(package scope), with leaves specialized (a "leaves" block, then the level loop over internal
levels) and without (one level loop over every level)."""
import pytest

import cortex_tvm as ct

from .common import H, V


@pytest.fixture(scope="package")
def lstm_model():
    return ct.models.TreeLSTM(hidden_size=H, vocab_size=V)


@pytest.fixture(scope="package")
def fc_model():
    return ct.models.TreeFC(hidden_size=H, vocab_size=V)


@pytest.fixture(scope="package")
def lstm_lowered(lstm_model):
    """Leaf-specialized: a "leaves" block, then the level loop over internal levels."""
    return lstm_model.lower(specialize_leaves=True)


@pytest.fixture(scope="package")
def fc_lowered(fc_model):
    return fc_model.lower(specialize_leaves=True)


@pytest.fixture(scope="package")
def lstm_plain(lstm_model):
    """Not specialized: one level loop over every level, leaves included."""
    return lstm_model.lower(specialize_leaves=False)


@pytest.fixture(scope="package")
def fc_plain(fc_model):
    return fc_model.lower(specialize_leaves=False)
