"""The SST trees and a padded TreeFC at H=16, compiled once for the runtime hardening files.

Session scope: the four test_runtime_*.py files share one build.  In this folder they shadow the
root conftest's `sst` and `fc` (a `Zoo` at H=32), which no test here uses."""
import pytest

import cortex_tvm as ct

from padded import compile_padded
from runtime_util import H


@pytest.fixture(scope="session")
def sst():
    return ct.data.sst_sample()


@pytest.fixture(scope="session")
def fc(sst):
    model = ct.models.TreeFC(hidden_size=H, vocab_size=len(sst[1]))
    return model, compile_padded(model)
