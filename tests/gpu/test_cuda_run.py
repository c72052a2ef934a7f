"""Compiled CUDA kernels vs the numpy reference on SST trees (needs a CUDA device; skips visibly otherwise)."""
from __future__ import annotations

import numpy as np
import pytest
import tvm

import cortex_tvm as ct
import reference

from _gpu_common import MODELS, STRATEGIES, compile_cuda

if not tvm.cuda(0).exist:
    pytest.skip("no CUDA device: tvm.cuda(0).exist is False (CUDA source/PTX checks are in "
                "test_cuda_codegen.py; run tests/gpu/run.sh on a GPU machine)", allow_module_level=True)

TOL = 2e-5


def _roots_reference(name, trees, weights):
    if name == "TreeFC":
        per_tree = reference.tree_fc(trees, weights)
    else:
        per_tree = reference.tree_lstm(trees, weights)[0]
    return np.stack([h[-1] for h in per_tree])


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("name", MODELS)
def test_cuda_matches_reference(sst, name, strategy):
    trees, vocab = sst
    model, compiled = compile_cuda(name, strategy, vocab_size=len(vocab))
    weights = {k: np.array(v) for k, v in model.weights.items()}
    for batch in (trees[:1], trees[:10], trees[:200], trees):
        got = compiled(batch)
        np.testing.assert_allclose(got, _roots_reference(name, batch, weights), atol=TOL, rtol=0)


@pytest.mark.parametrize("name", MODELS)
def test_cuda_all_nodes_and_repeat_calls(sst, name):
    trees, vocab = sst
    model, compiled = compile_cuda(name, "single", vocab_size=len(vocab))
    weights = {k: np.array(v) for k, v in model.weights.items()}
    batch = trees[10:40]
    ref = reference.tree_fc(batch, weights) if name == "TreeFC" else reference.tree_lstm(batch, weights)[0]
    for _ in range(2):
        per_tree = compiled(batch, all_nodes=True)
        for a, b in zip(per_tree, ref):
            np.testing.assert_allclose(a, b, atol=TOL, rtol=0)


def test_cuda_deep_tree_more_levels_than_grid(sst):
    """A chain deeper than the persistent grid: many grid barriers, one node per level."""
    trees, vocab = sst
    node = ct.data.Node(word=1)
    for w in range(300):
        node = ct.data.Node(children=[node, ct.data.Node(word=(w * 7) % len(vocab))])
    model, compiled = compile_cuda("TreeFC", "single", vocab_size=len(vocab))
    weights = {k: np.array(v) for k, v in model.weights.items()}
    np.testing.assert_allclose(compiled([node]), _roots_reference("TreeFC", [node], weights), atol=1e-4, rtol=0)


@pytest.mark.parametrize("name", ["TreeLSTM", "TreeFC"])
def test_cuda_backward_matches_the_cpu(sst, name):
    """compile(training=True, target="cuda"): the backward's levels on the GPU (`adjoint_gpu`)
    give the CPU's gradients, after the GPU's training forward (the roots' loss) and with the
    recomputation (a second vjp before the first's pullback)."""
    trees, vocab = sst
    model = getattr(ct.models, name)(hidden_size=32, vocab_size=len(vocab))
    on_gpu = model.compile(target="cuda", training=True)
    on_cpu = model.compile(training=True)
    batch = trees[:25]
    rng = np.random.default_rng(0)
    d_out = rng.standard_normal((len(batch), 32)).astype(np.float32)
    want = on_cpu.vjp(batch)[1](d_out)
    out, pullback = on_gpu.vjp(batch)
    np.testing.assert_allclose(out, on_cpu(batch), atol=1e-4, rtol=0)
    first = pullback(d_out)
    on_gpu.vjp(trees[25:30])
    again = pullback(d_out)                   # its values were overwritten: recomputed
    for grads in (first, again):
        for weight, g in want.items():
            scale = float(np.abs(g).max())
            np.testing.assert_allclose(grads[weight], g, atol=2e-5 * scale, rtol=0, err_msg=weight)
