"""`store_bf16` and `compile(precision="bf16")`: packed weights kept as bfloat16 bits (uint16),
widened to float32 where the kernel loads them.

Checked: the IR before and after (the packed parameter's dtype, the widening in the GEMM, the
rounding in the parameter transform); the rounding itself (nearest, ties to even) against a
numpy implementation, halfway cases included; every zoo model against the float64 reference
computed with the same weights rounded to bfloat16 (tight: the kernel computes exactly that
model) and with the float32 weights (the accuracy bound users get, 1e-2); export, load and
Relax; the records' key; and the errors.  The builds here are for this machine's CPU without
AVX512_BF16 (`STORAGE`): where the CPU has it, compile(precision="bf16") also multiplies in
bfloat16 (dot_bf16, tests/schedule/test_dot_bf16.py), which this file does not check.
"""
import os

import numpy as np
import pytest

import cortex_tvm as ct
from cortex_tvm.bench.cases import OPTIONS, structures
from cortex_tvm.compiler import padded_model
from cortex_tvm.models import reference64
from cortex_tvm.schedule import RecSchedule, ScheduleError
from cortex_tvm.target import host_llvm, make_target
from cortex_tvm.tune.workload import Workload

H = 32
#: this machine's CPU with AVX512_BF16 turned off: precision="bf16" is storage-only bf16 here
STORAGE = {**host_llvm(), "mattr": host_llvm().get("mattr", []) + ["-avx512bf16"]}


def bf16_round(x):
    """float32 -> the float32 value of its bfloat16 rounding (nearest, ties to even): numpy's
    own arithmetic on the bits, independent of the TIR the package generates."""
    bits = np.ascontiguousarray(x, np.float32).view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) & 0xFFFF
    return (rounded.astype(np.uint32) << 16).view(np.float32)


def _model(name, vocab_size):
    return ct.models.BY_NAME[name](hidden_size=H, vocab_size=vocab_size, **OPTIONS.get(name, {}))


def _rounded_copy(model, names):
    """The same model with the weights `names` rounded to bfloat16 (the rest as they are)."""
    copy = type(model)(hidden_size=model.hidden_size, vocab_size=model.vocab_size,
                       **OPTIONS.get(_zoo_name(model), {}))
    copy.load_weights({k: (bf16_round(v) if k in names else v) for k, v in model.weights.items()})
    return copy


def _zoo_name(model):
    return next(k for k, cls in ct.models.BY_NAME.items() if type(model) is cls)


@pytest.fixture(scope="module")
def sst():
    trees, vocab = ct.data.sst_sample()
    return trees, len(vocab)


@pytest.fixture(scope="module")
def treelstm(sst):
    trees, V = sst
    model = ct.models.TreeLSTM(hidden_size=H, vocab_size=V)
    return model, model.compile(precision="bf16", target=STORAGE)


# -- IR -------------------------------------------------------------------------------------

def _scheduled(model):
    """The model's default schedule replayed up to (not including) its last step, and the trace."""
    compiled = model.compile()
    tgt = make_target("llvm")
    rs = RecSchedule(padded_model(model, tgt).lower(specialize_leaves=False))
    for step in compiled.trace:
        getattr(rs, step["primitive"])(**step["args"])
    return rs


def test_ir_before_and_after(sst):
    _, V = sst
    rs = _scheduled(ct.models.TreeLSTM(hidden_size=H, vocab_size=V))
    params = {p.name: p for p in rs.func.params}
    assert str(params["U_packed"].dtype) == "float32"
    kernel = rs.script().split("def cortex_transform_params")[0]
    gemm = [line for line in kernel.splitlines() if "gates_sum[v_i0, v_i1, v_i2] = gates_sum[v_i0, v_i1, v_i2] + " in line]
    assert gemm and all("gates_sum[v_i0, v_i1, v_i2] + U_packed[" in line for line in gemm)
    rs.store_bf16()
    params = {p.name: p for p in rs.func.params}
    transform_params = {p.name: p for p in rs._functions()["cortex_transform_params"].params}
    assert str(params["U_packed"].dtype) == "uint16"
    # W is read only by the transform (the hoisted leaf tables): fewer bytes would gain nothing
    # there, so it keeps float32 and its tables are exact
    assert str(transform_params["W_packed"].dtype) == "float32" and "W_packed" not in params
    kernel, transform = rs.script().split("def cortex_transform_params")
    gemm = [line for line in kernel.splitlines() if "gates_sum[v_i0, v_i1, v_i2] = gates_sum[v_i0, v_i1, v_i2] + " in line]
    assert gemm and all('T.reinterpret("float32", T.Cast("uint32", U_packed[' in line and "<< T.uint32(16)" in line
                        for line in gemm)
    assert "U_packed[v_i0, v_i1, v_i2] = T.Cast(\"uint16\"" in transform
    assert "T.uint32(32767)" in transform                    # 0x7FFF: round to nearest, ties to even
    assert rs.plan.bf16_weights == ("U",)
    assert rs.trace[-1].primitive == "store_bf16"


def test_rounding_is_nearest_ties_to_even(sst):
    _, V = sst
    model = ct.models.TreeFC(hidden_size=H, vocab_size=V)
    W = model.weights["W"].copy()
    one = np.float32(1.0)
    halfway = [one + np.float32(2.0 ** -8),        # between 1 and 1 + 2^-7: the even one is 1
               one + np.float32(3 * 2.0 ** -8),    # between 1 + 2^-7 and 1 + 2^-6: the even one is 1 + 2^-6
               -(one + np.float32(2.0 ** -8)),
               np.float32(2.0 ** -8 + 2.0 ** -16),  # just above a tie at a small magnitude
               np.float32(3.3895314e38)]           # rounds up to the largest finite bfloat16
    W.ravel()[:len(halfway)] = halfway
    model.load_weights({**model.weights, "W": W})
    compiled = model.compile(precision="bf16", target=STORAGE)
    assert compiled.plan.bf16_weights == ("W",)
    packed = compiled._weights[[n for n, *_ in compiled.signature.weights].index("W_packed")]
    assert packed.dtype == np.uint16
    decoded = (packed.astype(np.uint32) << 16).view(np.float32)
    # packing only permutes (and pads with zeros), so the multisets of values agree
    want = bf16_round(padded_model(model, make_target("llvm")).weights["W"])
    np.testing.assert_array_equal(np.sort(decoded.ravel()), np.sort(want.ravel()))
    assert bf16_round(np.array(halfway, np.float32)).tolist()[:3] == [1.0, 1.0 + 2.0 ** -6, -1.0]


# -- numbers --------------------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(ct.models.BY_NAME))
def test_zoo_model_against_float64(name, sst):
    trees, V = sst
    model = _model(name, V)
    compiled = model.compile(precision="bf16", target=STORAGE)
    assert compiled.precision == "bf16" and compiled.plan.bf16_weights
    assert set(compiled.plan.bf16_weights) <= set(model.weights)
    batch = structures(name, trees[:12])
    got = np.asarray(compiled(batch), np.float64)
    # exactly the model with those weights rounded: float32 arithmetic, so ~1e-6
    exact = reference64(_rounded_copy(model, compiled.plan.bf16_weights), batch)
    scale = max(1.0, float(np.abs(exact).max()))
    assert float(np.abs(got - exact).max()) <= 1e-5 * scale
    # against the float32 weights: the accuracy a user gets from bf16 storage
    full = reference64(model, batch)
    err = float(np.abs(got - full).max())
    assert err <= 1e-2 * max(1.0, float(np.abs(full).max())), err
    assert err > 0          # the weights did change: this is not the fp32 build


def test_fp32_stays_the_default(treelstm, sst):
    trees, _ = sst
    model, bf16 = treelstm
    fp32 = model.compile()
    assert fp32.precision == "fp32" and fp32.plan.bf16_weights == ()
    assert all(w.dtype == np.float32 for w in fp32._weights)
    assert float(np.abs(fp32(trees[:10]) - reference64(model, trees[:10])).max()) <= 1e-5


# -- the paths around the kernel -----------------------------------------------------------

def test_export_load_and_relax(treelstm, sst, tmp_path):
    import tvm
    from tvm import relax
    trees, _ = sst
    model, compiled = treelstm
    batch = trees[:10]
    want = compiled(batch)
    loaded = ct.load(compiled.export(os.path.join(tmp_path, "bf16")))
    assert loaded.precision == "bf16" and loaded.plan.bf16_weights == compiled.plan.bf16_weights
    np.testing.assert_array_equal(loaded(batch), want)
    mod, make_inputs = model.as_relax(precision="bf16")
    vm = relax.VirtualMachine(tvm.compile(mod, target="llvm"), tvm.cpu())
    got = vm["main"](*make_inputs(batch)).numpy()
    exact = reference64(_rounded_copy(model, compiled.plan.bf16_weights), batch)
    assert float(np.abs(got - exact).max()) <= 1e-5


def test_traced_cell_compiles_in_bf16(sst):
    trees, V = sst
    rng = np.random.default_rng(0)

    @ct.recursive
    def tree_fc(node, p):
        if node.is_leaf:
            return p.emb[node.word]
        return ct.tanh(p.W @ (tree_fc(node.children[0], p) + tree_fc(node.children[1], p)) + p.b)

    weights = {"emb": rng.standard_normal((V, H)).astype("float32"),
               "W": (rng.standard_normal((H, H)) / np.sqrt(H)).astype("float32"),
               "b": np.zeros(H, "float32")}
    compiled = ct.compile(tree_fc, weights=weights, max_children=2, precision="bf16", target=STORAGE)
    assert compiled.precision == "bf16"
    fp32 = ct.compile(tree_fc, weights=weights, max_children=2)
    rounded = ct.compile(tree_fc, weights={**weights, "W": bf16_round(weights["W"])}, max_children=2)
    batch = trees[:10]
    np.testing.assert_allclose(compiled(batch), rounded(batch), atol=1e-5)
    assert 0 < float(np.abs(compiled(batch) - fp32(batch)).max()) <= 1e-2


def test_records_are_keyed_by_precision(sst):
    _, V = sst
    model = ct.models.TreeLSTM(hidden_size=H, vocab_size=V)
    fp32, bf16 = Workload.of(model, "llvm", 10), Workload.of(model, "llvm", 10, "bf16")
    assert fp32 != bf16 and not fp32.same_kind(bf16) and bf16.precision == "bf16"
    assert Workload.from_json(bf16.to_json()) == bf16
    old = {k: v for k, v in fp32.to_json().items() if k != "precision"}      # a record from before
    assert Workload.from_json(old) == fp32


def test_bad_precision_and_bad_schedules(sst):
    _, V = sst
    model = ct.models.TreeFC(hidden_size=H, vocab_size=V)
    for bad in ("fp8", "bfloat16", None, 16):
        with pytest.raises(ValueError, match="precision must be one of"):
            model.compile(precision=bad)
    with pytest.raises(ValueError, match="CPU targets"):
        model.compile(precision="bf16", target="cuda")
    with pytest.raises(ScheduleError, match="no packed weight is read by the kernel"):
        model.compile(precision="bf16", schedule="none")
    rs = _scheduled(model)
    with pytest.raises(ScheduleError, match="'emb' is not packed"):
        rs.store_bf16("emb")
    rs.store_bf16()
    with pytest.raises(ScheduleError, match="stored as bfloat16 already"):
        rs.store_bf16("W")


def test_a_bf16_recipe_is_not_silently_built_as_fp32(sst):
    from cortex_tvm import recipes
    _, V = sst
    model = ct.models.TreeFC(hidden_size=H, vocab_size=V)
    tgt = make_target("llvm")
    bf16 = recipes.with_precision(recipes.resolve(padded_model(model, tgt), tgt, None), "bf16")
    assert recipes.with_precision(bf16, "bf16") is bf16          # applied once, not twice
    assert model.compile(schedule=bf16, precision="bf16").precision == "bf16"
    with pytest.raises(ValueError, match="made for precision 'bf16', not 'fp32'"):
        model.compile(schedule=bf16)


def test_a_json_recipe_with_store_bf16_is_bf16(sst):
    from cortex_tvm import recipes
    steps = recipes.Recipe("mine", steps=({"primitive": "pack", "args": {"weight": "W", "tile": 16}},
                                          {"primitive": "store_bf16", "args": {}}))
    assert recipes.with_precision(steps, "bf16") is steps
    with pytest.raises(ValueError, match="made for precision 'bf16', not 'fp32'"):
        recipes.with_precision(steps, "fp32")
