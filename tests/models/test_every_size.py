"""Every zoo model, default (derived) schedule, at sizes that are not powers of two (odd ones
too), with E != H, at H=256, and as AVX2 code, against independent float64 numpy references.

The derived schedule pads sizes to the vector width (policy/padding.py) and register-tiles
every GEMM; these tests check that no size falls off that path (no ScheduleError, no
fallback warning, a tiled kernel) and that the padding never leaks into results.
"""
import warnings

import numpy as np
import pytest

import cortex_tvm as ct
import reference as tree_ref
from cortex_tvm.build import schedule_model
from cortex_tvm.policy.padding import padded_model
from cortex_tvm.data import Node

from . import reference_np as ref
from . import trees as tree_gen

V = 40
TOL = 2e-4


def _sst(count):
    return tree_gen.sst(count, V)


def _nary(count, k, seed):
    return tree_gen.nary_trees(count, k, seed, V)


def _words(count, seed):
    return tree_gen.word_lists(count, seed, V, max_len=15)


def _roots(got):
    return got if isinstance(got, np.ndarray) else np.stack([r[-1] for r in got])


# name -> (make(H, E), (structures, reference input), reference(input, weights) -> roots)
MODELS = {
    "TreeFC": (lambda H, E: ct.models.TreeFC(H, V), lambda: (lambda s: (s, s))(_sst(12)),
               lambda x, w: tree_ref.roots("TreeFC", x, w)),
    "TreeLSTM": (lambda H, E: ct.models.TreeLSTM(H, V, embed_size=E), lambda: (lambda s: (s, s))(_sst(12)),
                 lambda x, w: tree_ref.roots("TreeLSTM", x, w)),
    "TreeGRU": (lambda H, E: ct.models.TreeGRU(H, V, embed_size=E), lambda: (lambda s: (s, s))(_sst(12)),
                lambda x, w: _roots(ref.tree_gru(x, w))),
    "ChildSumTreeLSTM": (lambda H, E: ct.models.ChildSumTreeLSTM(H, V, max_children=3, embed_size=E),
                         lambda: (lambda s: (s, s))(_nary(12, 3, 1)),
                         lambda x, w: _roots(ref.child_sum_tree_lstm(x, w))),
    "MVRNN": (lambda H, E: ct.models.MVRNN(H, V), lambda: (lambda s: (s, s))(_sst(8)),
              lambda x, w: _roots(ref.mv_rnn(x, w))),
    "DAGRNN": (lambda H, E: ct.models.DAGRNN(H, V, embed_size=E),
               lambda: (lambda d: (d, d))([ct.data.grid_dag(3, 4, seed=s, vocab_size=V) for s in range(4)]),
               lambda x, w: _roots(ref.dag_rnn(x, w))),
    "SeqLSTM": (lambda H, E: ct.models.SeqLSTM(H, V, embed_size=E),
                lambda: (lambda w: (ct.data.sequences(w), w))(_words(10, 2)),
                lambda x, w: _roots(ref.seq_lstm_last(x, w))),
    "SeqGRU": (lambda H, E: ct.models.SeqGRU(H, V, embed_size=E),
               lambda: (lambda w: (ct.data.sequences(w), w))(_words(10, 3)),
               lambda x, w: _roots(ref.seq_gru_last(x, w))),
}
# (H, E): odd, prime, E != H in both directions, a multiple of 8 but not of 16
SIZES = [(13, 13), (37, 20), (24, 41)]


def _check(name, H, E, target="llvm"):
    make, structures, reference = MODELS[name]
    model = make(H, E)
    with warnings.catch_warnings():
        warnings.simplefilter("error")           # no fallback to a slower schedule, no warning at all
        compiled = model.compile(target=target)
    x, ref_input = structures()
    got = compiled(x)
    want = reference(ref_input, model.weights)
    assert got.dtype == np.float32 and got.shape == want.shape == (len(x), H)
    err = float(np.max(np.abs(got - want)))
    assert err <= TOL, f"{name} H={H} E={E}: max abs diff {err:g}"
    return model, compiled


@pytest.mark.parametrize("H,E", SIZES)
@pytest.mark.parametrize("name", list(MODELS))
def test_odd_sizes_match_reference(name, H, E):
    _check(name, H, E)


@pytest.mark.parametrize("name", [n for n in MODELS if n != "MVRNN"])
def test_h256_matches_reference(name):
    _check(name, 256, 256)


def test_mvrnn_h256_compiles_and_matches():
    _check("MVRNN", 256, 256)


@pytest.mark.parametrize("name", ["TreeLSTM", "TreeFC", "SeqGRU"])
def test_avx2_code_runs_here(name):
    """`mcpu=haswell` builds AVX2 code (16 ymm registers); it runs on any x86-64 host with AVX2."""
    _, compiled = _check(name, 37, 37, target={"kind": "llvm", "mcpu": "haswell"})
    assert "haswell" in str(compiled.target)
    # LLVM IR of the inference: 8-lane vectors, never 16.  The parameter transforms run once
    # and are left to LLVM's loop vectorizer, which may use wider virtual vectors there.
    chunks = compiled.inspect_source().split("\ndefine ")
    ir = "\n".join(c for c in chunks if "@cortex_transform_params" not in c[:c.find("(")])
    assert "<8 x float>" in ir and "<16 x float>" not in ir


@pytest.mark.parametrize("name", list(MODELS))
def test_every_gemm_is_register_tiled(name):
    """Padding makes every weight GEMM divisible by the vector width, so each gets a micro-kernel."""
    from cortex_tvm.policy import derive
    model = MODELS[name][0](37, 20)
    target = ct.make_target("llvm")
    padded = padded_model(model, target)
    rs, recipe = schedule_model(padded, target)
    assert recipe.name == "derived"
    tiled = {s.args["block"] for s in rs.trace if s.primitive == "tile_gemm"}
    plain = ct.RecSchedule(padded.lower(specialize_leaves=False))
    plain.specialize_leaves()
    if any(s.primitive == "hoist" for s in rs.trace):
        plain.hoist()
    tails = [s.args["multiple"] for s in rs.trace if s.primitive == "level_tails"]
    if tails:
        plain.level_tails(tails[0])          # the tails' copies of each GEMM are tiled too
    want = {g.block for g in derive.gemms(plain)}
    assert want and tiled == want, (tiled, want)


def test_padded_model_exports_and_loads_with_its_own_size(tmp_path):
    """A kernel padded from H=13 to the vector width still returns (B, 13) after export/load."""
    model, compiled = _check("TreeLSTM", 13, 13)
    x, _ = MODELS["TreeLSTM"][1]()
    compiled.export(tmp_path / "m")
    loaded = ct.load(tmp_path / "m")
    assert loaded.state_shapes == ((13,), (13,))
    np.testing.assert_array_equal(loaded(x), compiled(x))
    every = loaded(x[:2], all_nodes=True)
    assert [e.shape[1] for e in every] == [13, 13]
    # other weights in the user's sizes (13, not the kernel's padded 16): padded as compile() pads
    other = type(model)(hidden_size=13, vocab_size=model.vocab_size, seed=11)
    reloaded = ct.load(tmp_path / "m", weights=other.weights)
    np.testing.assert_allclose(reloaded(x), other.reference(x), atol=1e-4, rtol=0)
    with pytest.raises(ValueError, match=r"weight 'U': shape \(80, 32\), expected \(65, 26\)"):
        ct.load(tmp_path / "m", weights={**other.weights, "U": np.zeros((80, 32), np.float32)})
