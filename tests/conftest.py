"""Shared fixtures: each model is compiled once per session (compiling takes ~1 s)."""
import os
import sys

os.environ.setdefault("TVM_NUM_THREADS", "2")   # before tvm is imported anywhere

sys.path.insert(0, os.path.dirname(__file__))    # so tests can `import reference`

from dataclasses import dataclass  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402

import cortex_tvm as ct  # noqa: E402

H = 32
MODEL_NAMES = ("TreeFC", "TreeLSTM")


@dataclass
class Zoo:
    """A model, its compiled forms, and a frozen copy of the weights they were compiled with."""

    name: str
    model: object
    compiled: object            # default schedule
    weights: dict               # copy of model.weights at compile time

    @property
    def vocab_size(self):
        return self.model.vocab_size


@pytest.fixture(scope="session")
def sst():
    """(trees, vocab) of the bundled 1101 SST dev trees."""
    trees, vocab = ct.data.sst_sample()
    assert len(trees) == 1101
    return trees, vocab


def _make(name, vocab_size, schedule=None):
    model = getattr(ct.models, name)(hidden_size=H, vocab_size=vocab_size)
    compiled = model.compile(target="llvm", schedule=schedule)
    weights = {k: np.array(v, copy=True) for k, v in model.weights.items()}
    return Zoo(name, model, compiled, weights)


@pytest.fixture(scope="session")
def get_zoo(sst):
    """get_zoo(name, schedule=None) -> Zoo, compiled once per (name, schedule) per session."""
    cache = {}

    def get(name, schedule=None):
        if (name, schedule) not in cache:
            cache[name, schedule] = _make(name, len(sst[1]), schedule)
        return cache[name, schedule]
    return get


@pytest.fixture(scope="session", params=MODEL_NAMES)
def zoo(request, get_zoo):
    """Each zoo model at H=32 with the SST vocabulary, default schedule, compiled once."""
    return get_zoo(request.param)


@pytest.fixture(scope="session")
def zoo_none(zoo, get_zoo):
    """The same model as `zoo` compiled with schedule="none" (same seed, so the same weights)."""
    return get_zoo(zoo.name, "none")


@pytest.fixture(scope="session")
def lstm(get_zoo):
    return get_zoo("TreeLSTM")


@pytest.fixture(scope="session")
def fc(get_zoo):
    return get_zoo("TreeFC")
