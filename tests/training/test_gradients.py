"""compile(training=True): the generated backward against independent references.

* every zoo model, on its own structures (SST trees, sequences of SST words, grid DAGs whose
  nodes have several parents), at a size the kernel pads (H=6): sampled weight gradients
  against central differences of the float64 per-node reference (`models.reference64`),
  which shares nothing with the linearizer, the kernels or the backward;
* words on inner nodes (TreeLSTM(inner_words=True), the child-sum cell), unary nodes;
* the backward's own arrays: `Adjoint.vjp` on the numpy executor's states gives the same
  gradients as `compiled.vjp` on the kernel's (padding sliced off, slots re-mapped), also
  for a kernel that unrolls the recursion (`max_unroll_depth=2`).
"""
import numpy as np
import pytest

import cortex_tvm as ct
from cortex_tvm import dot_bf16
from cortex_tvm.adjoint import Adjoint
from cortex_tvm.bench.cases import OPTIONS, structures
from cortex_tvm.data import Node
from cortex_tvm.models import reference64
from cortex_tvm.target import host_features

H = 6
EPS = 1e-6


@pytest.fixture(scope="module")
def sst_small(sst):
    trees, vocab = sst
    return trees[:4], len(vocab)


def _loss64(model, structs, weights64, direction):
    """sum(roots * direction) in float64, the model's own float64 reference."""
    saved = model.weights
    model.weights = weights64
    try:
        return float((reference64(model, structs) * direction).sum())
    finally:
        model.weights = saved


def _entries(name, shape, rng, words, count=4):
    for _ in range(count):
        if name.startswith("emb"):                 # a row some node reads
            yield (int(rng.choice(words)),) + tuple(int(rng.integers(0, s)) for s in shape[1:])
        else:
            yield tuple(int(rng.integers(0, s)) for s in shape)


def _central_difference(model, structs, weights64, direction, name, idx) -> float:
    """d sum(roots * direction) / d weights64[name][idx], by central differences in float64."""
    plus = {k: v.copy() for k, v in weights64.items()}
    minus = {k: v.copy() for k, v in weights64.items()}
    plus[name][idx] += EPS
    minus[name][idx] -= EPS
    return (_loss64(model, structs, plus, direction) - _loss64(model, structs, minus, direction)) / (2 * EPS)


def check_against_differences(model, structs, compiled, seed=0):
    """Every weight's gradient of sum(roots * R), at sampled entries, against central differences."""
    rng = np.random.default_rng(seed)
    out, vjp = compiled.vjp(structs)
    direction = rng.standard_normal(out.shape)
    grads = vjp(direction.astype(np.float32))
    assert sorted(grads) == sorted(model.weights)
    weights64 = {k: v.astype(np.float64) for k, v in model.weights.items()}
    lin = model.linearize(structs)
    words = [int(w) for w in lin.words[lin.level_offsets[0]:lin.level_offsets[-1]] if w < model.vocab_size]
    checked = 0
    for name, w in weights64.items():
        assert grads[name].shape == w.shape and grads[name].dtype == np.float32
        for idx in _entries(name, w.shape, rng, words):
            numeric = _central_difference(model, structs, weights64, direction, name, idx)
            assert abs(grads[name][idx] - numeric) <= 2e-4 + 1e-3 * abs(numeric), (name, idx, grads[name][idx], numeric)
            checked += numeric != 0
    assert checked >= len(weights64)            # most sampled entries matter: the check can fail


@pytest.mark.parametrize("name", sorted(ct.models.BY_NAME))
def test_every_zoo_model_against_central_differences(name, sst_small):
    trees, V = sst_small
    model = ct.models.BY_NAME[name](hidden_size=H, vocab_size=V, **OPTIONS.get(name, {}))
    structs = structures(name, trees)
    check_against_differences(model, structs, model.compile(training=True))


def _inner_word_trees():
    return [Node(word=3, children=[Node(word=1), Node(children=[Node(word=4), Node(word=7)])]),
            Node(children=[Node(word=2, children=[Node(word=5), Node(word=9)]), Node(word=8)])]


def test_words_on_inner_nodes():
    model = ct.models.TreeLSTM(H, 20, inner_words=True, seed=3)
    check_against_differences(model, _inner_word_trees(), model.compile(training=True), seed=1)


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_a_batch_of_leaves_alone(precision):
    """Trees of one leaf each: no internal node, so the packed weight sums over the internal stage
    run on no nodes (no block step holds one) and must still write zeros; the leaves' weights get
    the reference's gradients (central differences; bf16 within its rounding, on an AVX512_BF16 CPU).
    (Until 2026-12-07 the pass refused such a batch with TVM's "expected to be compact array": numpy
    makes an array of no rows with strides of 0; `scratch.held_rows` now keeps at least a row.)"""
    if precision == "bf16" and dot_bf16.FEATURE not in host_features():
        pytest.skip("bf16 products need an AVX512_BF16 CPU")
    model = ct.models.TreeLSTM(16, 20, seed=4)        # (16: the pairs' nests need whole AVX-512 vectors)
    trees = [Node(word=w) for w in (3, 7, 3, 11, 0)]
    out, vjp = model.compile(training=True, precision=precision).vjp(trees)
    direction = np.random.default_rng(5).standard_normal(out.shape)
    grads = vjp(direction.astype(np.float32))
    assert not grads["U"].any() and not grads["bU"].any()
    weights64 = {k: v.astype(np.float64) for k, v in model.weights.items()}
    tolerance = 2e-4 if precision == "fp32" else 2e-2
    for name, idx in [("W", (5, 2)), ("W", (40, 9)), ("bW", (17,)), ("emb", (3, 4)), ("emb", (11, 0))]:
        numeric = _central_difference(model, trees, weights64, direction, name, idx)
        assert numeric != 0
        assert abs(grads[name][idx] - numeric) <= tolerance * (1 + abs(numeric)), (name, idx, grads[name][idx], numeric)


def test_child_sum_with_unary_and_wide_nodes():
    model = ct.models.ChildSumTreeLSTM(H, 20, max_children=3, seed=2)
    trees = [Node(word=3, children=[Node(word=1)]),                                  # a unary node
             Node(children=[Node(word=4), Node(word=7), Node(children=[Node(word=9)])])]
    check_against_differences(model, trees, model.compile(training=True), seed=2)


def test_backward_of_the_kernel_states_equals_backward_of_the_numpy_states(sst, monkeypatch):
    """compiled.vjp runs the compiled backward's own forward; where there is none, it maps the
    kernel's (padded, tiled, possibly unrolled) slots to one node per slot.  Either way its
    outputs and gradients are those of the backward run on the numpy executor's states."""
    trees, vocab = sst
    batch = trees[10:22]
    model = ct.models.TreeLSTM(20, len(vocab), seed=5)         # 20: padded to the vector width
    lin = model.linearize(batch)
    states = model.numpy_forward(lin)
    rng = np.random.default_rng(4)
    d_roots = rng.standard_normal((len(batch), 20)).astype(np.float32)
    d_states = [np.zeros_like(s) for s in states]
    d_states[0][lin.roots] = d_roots
    want = Adjoint(model.program, model.linearize).vjp(lin, states, model.weights, d_states)
    own = model.compile(training=True)
    monkeypatch.setattr(own.adjoint.level_pass, "forward_pays", lambda lin: True)    # whatever the cores
    unrolled = model.compile(training=True, max_unroll_depth=2)
    monkeypatch.setattr(unrolled.adjoint, "forward", lambda lin, weights: None)     # the kernel's states
    for compiled, backward in ((own, ("backward", "parallel")), (unrolled, ("all", "parallel"))):
        out, vjp = compiled.vjp(batch)
        np.testing.assert_allclose(out, states[0][lin.roots], rtol=1e-5, atol=1e-5)
        got = vjp(d_roots)
        assert compiled.adjoint.level_pass.last_run == backward      # with the recomputation or not
        for name in want:
            np.testing.assert_allclose(got[name], want[name], rtol=1e-4, atol=1e-5, err_msg=name)


def test_a_pullback_after_another_forward_recomputes(sst, monkeypatch):
    """The backward after its own forward reuses the values that forward kept; a second vjp on
    the same thread overwrites them, so the first one's pullback computes them again."""
    trees, vocab = sst
    model = ct.models.TreeLSTM(20, len(vocab), seed=5)
    compiled = model.compile(training=True)
    level_pass = compiled.adjoint.level_pass
    monkeypatch.setattr(level_pass, "forward_pays", lambda lin: True)             # whatever the cores
    first, second = trees[:7], trees[30:33]
    rng = np.random.default_rng(8)
    d_first, d_second = (rng.standard_normal((len(b), 20)).astype(np.float32) for b in (first, second))
    out, pullback = compiled.vjp(first)
    alone = pullback(d_first)
    assert level_pass.last_run == ("backward", "parallel")               # the forward's values
    out_first, pull_first = compiled.vjp(first)
    out_second, pull_second = compiled.vjp(second)
    late = pull_first(d_first)
    assert level_pass.last_run == ("all", "parallel")                    # recomputed
    np.testing.assert_array_equal(out_first, out)
    for name in alone:
        np.testing.assert_allclose(late[name], alone[name], rtol=1e-5, atol=1e-6, err_msg=name)
    again = pull_second(d_second)                     # its values were overwritten by the recomputation
    assert level_pass.last_run == ("all", "parallel")
    lin = model.linearize(second)
    states = model.numpy_forward(lin)
    d_states = [np.zeros_like(s) for s in states]
    d_states[0][lin.roots] = d_second
    want = Adjoint(model.program, model.linearize).vjp(lin, states, model.weights, d_states)
    np.testing.assert_allclose(out_second, states[0][lin.roots], rtol=1e-5, atol=1e-5)
    for name in want:
        np.testing.assert_allclose(again[name], want[name], rtol=1e-4, atol=1e-5, err_msg=name)


def test_small_levels_run_the_kernel_forward(sst, monkeypatch):
    """vjp's forward is the compiled pass's own where its busiest core's node forwards, level by
    level, are at most the kernel's and the recomputation's (2 N / cores), else the model's
    kernel: on 2 cores always the pass; on 16, one tree takes the kernel, 25 the pass."""
    trees, vocab = sst
    model = ct.models.TreeLSTM(20, len(vocab), seed=5)
    compiled = model.compile(training=True)
    level_pass = compiled.adjoint.level_pass
    one, many = model.linearize(trees[:1]), model.linearize(trees[:25])
    assert np.diff(one.level_offsets).tolist() == [13, 3, 2, 1, 1, 1, 1, 1, 1, 1]     # N = 25, 10 levels
    for cores in (1, 2):
        monkeypatch.setattr(level_pass, "cores", cores)
        assert level_pass.forward_pays(one) and level_pass.forward_pays(many)
    monkeypatch.setattr(level_pass, "cores", 16)     # one tree: 10 node forwards a core against 2 x 25 / 16
    assert not level_pass.forward_pays(one) and level_pass.forward_pays(many)
    out, pullback = compiled.vjp(trees[:1])
    assert level_pass.last_run is None                          # the kernel ran, not the pass
    pullback(np.ones_like(out))
    assert level_pass.last_run == ("all", "parallel")
    out, pullback = compiled.vjp(trees[:25])
    assert level_pass.last_run == ("forward", "parallel")
