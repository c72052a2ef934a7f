"""Small shared fixtures for the RecSchedule primitive tests (H=32, a few SST batches).

Models with the same name and sizes have the same (seeded) weights, so the
numpy reference is computed once per model and batch for the whole session.
"""
import numpy as np
import pytest

import cortex_tvm as ct
from cortex_tvm.data import Node, chain_tree

import reference as ref

H = 32
TOL = 1e-4


@pytest.fixture(scope="session")
def vocab_size(sst):
    return len(sst[1])


@pytest.fixture(scope="session")
def batches(sst, vocab_size):
    """A few small batches: SST slices, a deep chain, single leaves, a unary node."""
    trees = sst[0]
    return [
        trees[:24],
        trees[700:740],
        [chain_tree(40, seed=5, vocab_size=vocab_size), trees[3]],
        [Node(word=0), Node(word=vocab_size - 1), Node(children=[Node(word=9)]), trees[11]],
    ]


@pytest.fixture(scope="session")
def make_model(vocab_size):
    """make_model("TreeLSTM" | "TreeFC") -> a fresh model at H=32 (same weights every time)."""
    def make(name):
        return getattr(ct.models, name)(hidden_size=H, vocab_size=vocab_size)
    return make


@pytest.fixture(scope="session")
def fresh(make_model):
    """fresh(name) -> a RecSchedule of the unspecialized program (what recipes start from)."""
    models = {}

    def make(name):
        if name not in models:
            models[name] = make_model(name)
        return ct.RecSchedule(models[name].lower(specialize_leaves=False))
    return make


@pytest.fixture(scope="session")
def expected(batches, make_model):
    """expected(name) -> [(B, H) float64 root states per batch] from tests/reference.py."""
    cache = {}

    def get(name):
        if name not in cache:
            weights = make_model(name).weights
            cache[name] = [ref.roots(name, b, weights) for b in batches]
        return cache[name]
    return get


@pytest.fixture(scope="session")
def check_numbers(batches, expected, make_model):
    """check_numbers(name, schedule) -> the compiled model, after checking it against the reference."""
    def check(name, schedule):
        compiled = make_model(name).compile(schedule=schedule)
        for batch, want in zip(batches, expected(name)):
            got = compiled(batch)
            assert got.dtype == np.float32 and got.shape == want.shape
            err = float(np.max(np.abs(got.astype(np.float64) - want)))
            assert err <= TOL, f"{name}: max abs diff {err:g} > {TOL:g}"
        return compiled
    return check
