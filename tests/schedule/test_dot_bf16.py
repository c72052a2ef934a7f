"""`dot_bf16`: packed weights as bfloat16 pairs and the tiled GEMMs on AVX512_BF16's `vdpbf16ps`.

Checked: the IR before and after (the packed parameter's layout and dtype, the stage that
rounds each node's state to bfloat16 pairs once, the lane x pair loops replaced by one
`cortex_dpbf16ps` call; inside one parallel region, the pair rounded at each use); the
assembly for Cooper Lake and Zen 4 (built here, never run: these tests run on any x86
host); the pairs the transform writes against numpy's own rounding; every internal node of
TreeFC against a numpy product of the same bfloat16-rounded factors, both rounding paths
against each other, export/load, and every zoo model's roots against float64 (these run the
kernel, so they are skipped, visibly, on a CPU without AVX512_BF16); the choice `recipes`
makes by target; and the errors (a build for a CPU without the feature among them).
"""
import numpy as np
import pytest

import cortex_tvm as ct
from cortex_tvm import dot_bf16, recipes, tir_rewrites
from cortex_tvm.bench.cases import OPTIONS, structures
from cortex_tvm.compile_cache import build_module
from cortex_tvm.compiler import padded_model
from cortex_tvm.data import postorder
from cortex_tvm.models import reference64
from cortex_tvm.schedule import RecSchedule, ScheduleError
from cortex_tvm.target import host_features, host_llvm, make_target

H = 32
COOPER = {"kind": "llvm", "mtriple": "x86_64-linux-gnu", "mcpu": "cooperlake"}     # AVX512_BF16, no AMX
ZEN4 = {"kind": "llvm", "mtriple": "x86_64-linux-gnu", "mcpu": "znver4"}
NO_BF16 = {"kind": "llvm", "mtriple": "x86_64-linux-gnu", "mcpu": "skylake-avx512"}

needs_bf16_cpu = pytest.mark.skipif(
    dot_bf16.FEATURE not in host_features(),
    reason="runs vdpbf16ps: this CPU has no AVX512_BF16 (Intel Cooper Lake / Sapphire Rapids or AMD Zen 4 "
           "and later); the IR and assembly tests still ran")


#: this CPU without AMX: on an AMX CPU precision="bf16" multiplies on tiles (test_amx_bf16.py)
DOT_HOST = {**host_llvm(), "mattr": host_llvm().get("mattr", []) + ["-amx-bf16", "-amx-int8", "-amx-tile"]}


def bf16_bits(x):
    """float32 -> bfloat16 bits (nearest, ties to even), numpy's own arithmetic on the bits."""
    bits = np.ascontiguousarray(x, np.float32).view(np.uint32).astype(np.uint64)
    return (((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) & 0xFFFF).astype(np.uint32)


def bf16_round(x):
    return (bf16_bits(x) << 16).view(np.float32)


@pytest.fixture(scope="module")
def sst():
    trees, vocab = ct.data.sst_sample()
    return trees, len(vocab)


def _scheduled(model, target="llvm"):
    """The model's fp32 schedule for `target`, replayed on a fresh RecSchedule."""
    tgt = make_target(target)
    compiled = model.compile(target=tgt)
    rs = RecSchedule(padded_model(model, tgt).lower(specialize_leaves=False))
    for step in compiled.trace:
        getattr(rs, step["primitive"])(**step["args"])
    return rs


def _param(func, name):
    return next(p for p in func.params if p.name == name)


# -- IR -------------------------------------------------------------------------------------

def test_ir_before_and_after(sst):
    _, V = sst
    rs = _scheduled(ct.models.TreeLSTM(hidden_size=H, vocab_size=V), ZEN4)
    before = _param(rs.func, "U_packed")
    assert str(before.dtype) == "float32" and [int(d) for d in before.shape] == [2, 64, 80]
    kernel = rs.script().split("def cortex_transform_params")[0]
    assert "cortex_dpbf16ps" not in kernel and "pragma_import_llvm" not in kernel
    assert 'T.sblock("gates_sum")' in kernel and "U_packed[" in kernel

    rs.dot_bf16("U")
    after = _param(rs.func, "U_packed")
    assert str(after.dtype) == "uint32" and [int(d) for d in after.shape] == [2, 32, 80]   # k pairs
    assert rs.plan.bf16_weights == ("U",) and rs.trace[-1].primitive == "dot_bf16"
    kernel, transform = rs.script().split("def cortex_transform_params")
    calls = [line for line in kernel.splitlines() if 'T.call_extern("float32x16", "cortex_dpbf16ps"' in line]
    # one call per copy of the GEMM: the whole tiles of 3 nodes and the tails of 1 and 2 (level_tails)
    assert len(calls) == 3 and sum("gates_sum_tail1[" in c for c in calls) == 1
    update = [line for line in calls if "gates_sum_tail" not in line]
    assert len(update) == 1
    # the accumulators, 16 at a time; the state's pair, rounded once per node, broadcast; the
    # weight's 16 pairs
    assert "= T.call_extern(" in update[0] and "gates_sum[" in update[0] and "T.Ramp(" in update[0]
    assert 'T.Broadcast(T.reinterpret("int32", gates_sum_update_x_pairs[' in update[0]
    assert 'T.reinterpret("int32x16", U_packed[' in update[0] and "T.uint32(32767)" not in update[0]
    # the stage before the GEMM: each node's two children's states as bf16 pairs, (rows, 2, 16)
    assert 'gates_sum_update_x_pairs = T.sblock_alloc_buffer((T.max(max_level_size, 64), 2, 16), "uint32")' in kernel
    stage = next(line for line in kernel.splitlines() if "gates_sum_update_x_pairs[v_n, v_r0, v_kp] = " in line)
    assert "h[children[level_offsets[v_1] + v_n, v_r0], v_kp * 2]" in stage
    assert "h[children[level_offsets[v_1] + v_n, v_r0], v_kp * 2 + 1]" in stage
    assert stage.count("T.uint32(32767)") == 2
    assert kernel.index('T.sblock("gates_sum_update_x_pairs")') < kernel.index('T.sblock("gates_sum_init")')
    assert 'T.attr(0, "pragma_import_llvm"' in kernel
    assert 'T.sblock("gates_sum_init")' in kernel and 'T.sblock("gates_sum_update")' in kernel
    # the pair loop went inside the lanes and both became the call: no vectorized loop is left
    # around the update
    lines = kernel.splitlines()
    at = next(i for i, line in enumerate(lines) if 'T.sblock("gates_sum_update")' in line)
    assert not any("T.vectorized" in line for line in lines[at - 3:at])
    # the transform: element (a, kp, c) holds the bfloat16 bits of U[r, 2 kp] and U[r, 2 kp + 1]
    pack = next(line for line in transform.splitlines() if "U_packed[v_a, v_kp, v_c] =" in line)
    assert "v_kp * 2]" in pack and "v_kp * 2 + 1]" in pack
    assert pack.count("T.uint32(32767)") == 2 and pack.endswith("<< T.uint32(16)")
    # the rest of the packed weights: store_bf16 takes them, not the ones already in pairs
    rs.store_bf16()
    assert str(_param(rs.func, "U_packed").dtype) == "uint32" and rs.plan.bf16_weights == ("U",)
    assert str(_param(rs._functions()["cortex_transform_params"], "W_packed").dtype) == "float32"


@pytest.mark.parametrize("target", [COOPER, ZEN4], ids=["cooperlake", "znver4"])
def test_assembly_has_vdpbf16ps(target, sst):
    """Compiled for a CPU with AVX512_BF16 (not run: any x86 host can build it)."""
    _, V = sst
    model = ct.models.TreeLSTM(hidden_size=H, vocab_size=V)
    compiled = model.compile(target=target, precision="bf16")
    assert [s["primitive"] for s in compiled.trace][-2:] == ["dot_bf16", "store_bf16"]
    asm = compiled.executable.mod.inspect_source("asm")
    # 4 k pairs x 3 nodes x 5 gates, unrolled: one instruction each, the state pair shared
    assert asm.count("vdpbf16ps") >= 60
    fp32 = model.compile(target=target)
    assert "vdpbf16ps" not in fp32.executable.mod.inspect_source("asm")


def test_transform_writes_the_pairs(sst):
    """U_packed[a, kp, c] = bits(U[r, 2 kp]) | bits(U[r, 2 kp + 1]) << 16 for the row r that
    pack's layout puts at (a, c), against numpy's rounding.  Only the parameter transform is
    built for this host and run (it has no vdpbf16ps): no skip."""
    import tvm
    _, V = sst
    model = ct.models.TreeLSTM(hidden_size=H, vocab_size=V)
    rs = _scheduled(model, ZEN4)        # 16-lane tiles, whatever this host's vector width
    rs.dot_bf16("U")
    (_, axis, tile, groups, extent), = [p for p in rs.plan.packs if p[0] == "U"]
    transform = rs._functions()["cortex_transform_params"]
    executable = build_module(tvm.IRModule({"cortex_transform_params": transform}), make_target("llvm"))
    U = padded_model(model, make_target(ZEN4)).weights
    weights = {name: np.asarray(U[name], np.float32) for name, _, _ in rs.signature.model_weights()}
    out = {}
    args = []
    for name, shape, dtype, written in rs.signature.transform:
        out[name] = np.zeros(shape, dtype) if written else weights[name]
        args.append(tvm.runtime.tensor(out[name]))
    executable["cortex_transform_params"](*args)
    got = args[[t[0] for t in rs.signature.transform].index("U_packed")].numpy()
    assert got.dtype == np.uint32 and got.shape == (2, 32, 80)
    inverse = tir_rewrites.untile_axis(axis, tile, groups, extent)
    a, kp, c = np.indices(got.shape)
    r_lo, k_lo = inverse(a, 2 * kp, c)
    r_hi, k_hi = inverse(a, 2 * kp + 1, c)
    assert np.array_equal(r_lo, r_hi) and np.array_equal(k_hi, k_lo + 1)
    want = bf16_bits(weights["U"][r_lo, k_lo]) | (bf16_bits(weights["U"][r_hi, k_hi]) << 16)
    np.testing.assert_array_equal(got, want)


def test_in_one_parallel_region_each_use_rounds_its_pair(sst):
    """With persistent_threads the level is one parallel region, where a rounding stage would
    need its own barrier: there the GEMM rounds the state's pair where it reads it."""
    _, V = sst
    rs = _scheduled(ct.models.TreeLSTM(hidden_size=H, vocab_size=V), ZEN4)
    rs.persistent_threads()
    rs.dot_bf16()
    kernel = rs.script().split("def cortex_transform_params")[0]
    assert "x_pairs" not in kernel
    update = next(line for line in kernel.splitlines() if '"cortex_dpbf16ps"' in line)
    assert 'T.Broadcast(T.reinterpret("int32", T.reinterpret("uint32", h[children[' in update
    assert update.count("T.uint32(32767)") == 2


# -- numbers (run the kernel) ---------------------------------------------------------------

@needs_bf16_cpu
def test_every_node_against_numpy_bf16_products(sst):
    """TreeFC, h = tanh(W (h_l + h_r) + b): each internal node's h from its children's h as the
    kernel computed them, with W and the child sum rounded to bfloat16 (numpy's rounding) and
    the products summed in float64: agrees to float32 accumulation (~1e-6).  Any rounding or
    pairing mistake (a wrong half, a pair of the wrong k, a state not rounded) is 1e-3 or more."""
    trees, V = sst
    model = ct.models.TreeFC(hidden_size=H, vocab_size=V)
    compiled = model.compile(target=DOT_HOST, precision="bf16")
    assert "dot_bf16" in [s["primitive"] for s in compiled.trace]
    W, b, emb = (np.asarray(model.weights[k]) for k in ("W", "b", "emb"))
    W16 = bf16_round(W).astype(np.float64)
    batch = trees[:16]
    worst, internal = 0.0, 0
    for tree, h in zip(batch, compiled(batch, all_nodes=True)):
        order = postorder(tree)
        index = {id(n): p for p, n in enumerate(order)}
        for p, node in enumerate(order):
            if node.is_leaf:
                np.testing.assert_array_equal(h[p], emb[node.word])
                continue
            rows = [h[index[id(ch)]] for ch in node.children] + [np.zeros(H, np.float32)] * (2 - len(node.children))
            x = (rows[0] + rows[1]).astype(np.float32)            # the kernel's float32 child sum
            want = np.tanh(W16 @ bf16_round(x).astype(np.float64) + b)
            worst = max(worst, float(np.abs(h[p] - want).max()))
            internal += 1
    assert internal > 100 and worst <= 2e-6, worst
    # rounding the states matters: the same products with float32 states are off by far more
    x_unrounded = max(float(np.abs(np.tanh(W16 @ emb[t.word].astype(np.float64)) -
                                   np.tanh(W16 @ bf16_round(emb[t.word]).astype(np.float64))).max())
                      for t in postorder(batch[0]) if t.is_leaf)
    assert x_unrounded > 1e-4


@needs_bf16_cpu
@pytest.mark.parametrize("name", sorted(ct.models.BY_NAME))
def test_zoo_model_against_float64(name, sst):
    trees, V = sst
    model = ct.models.BY_NAME[name](hidden_size=H, vocab_size=V, **OPTIONS.get(name, {}))
    compiled = model.compile(target=DOT_HOST, precision="bf16")
    assert compiled.precision == "bf16" and "dot_bf16" in [s["primitive"] for s in compiled.trace]
    assert "vdpbf16ps" in compiled.executable.mod.inspect_source("asm")
    batch = structures(name, trees[:12])
    full = reference64(model, batch)
    err = float(np.abs(np.asarray(compiled(batch), np.float64) - full).max())
    assert 0 < err <= 1e-2 * max(1.0, float(np.abs(full).max())), err


@needs_bf16_cpu
def test_rounding_once_or_at_each_use_computes_the_same(sst):
    trees, V = sst
    model = ct.models.TreeLSTM(hidden_size=H, vocab_size=V)
    steps = model.compile(target=DOT_HOST).trace

    def schedule(persistent):
        def apply(rs):
            for step in steps:
                getattr(rs, step["primitive"])(**step["args"])
            if persistent:
                rs.persistent_threads()
            return rs
        return apply
    once = model.compile(target=DOT_HOST, schedule=schedule(False), precision="bf16")
    each = model.compile(target=DOT_HOST, schedule=schedule(True), precision="bf16")
    assert "dot_bf16" in [s["primitive"] for s in once.trace]
    assert "persistent_threads" in [s["primitive"] for s in each.trace]
    batch = trees[:20]
    np.testing.assert_allclose(once(batch), each(batch), atol=1e-6)
    assert float(np.abs(once(batch) - reference64(model, batch)).max()) <= 1e-2


@needs_bf16_cpu
def test_export_and_load(sst, tmp_path):
    trees, V = sst
    model = ct.models.TreeLSTM(hidden_size=H, vocab_size=V)
    compiled = model.compile(target=DOT_HOST, precision="bf16")
    loaded = ct.load(compiled.export(str(tmp_path / "dot")))
    assert loaded.plan.bf16_weights == ("U",)
    np.testing.assert_array_equal(loaded(trees[:10]), compiled(trees[:10]))


# -- the choice by target, and errors -------------------------------------------------------

def test_recipes_multiply_in_bf16_only_where_the_cpu_can(sst):
    _, V = sst
    model = ct.models.TreeLSTM(hidden_size=H, vocab_size=V)
    for target, dot in ((COOPER, True), (ZEN4, True), (NO_BF16, False),
                        ({"kind": "llvm", "mtriple": "x86_64-linux-gnu", "mcpu": "znver3"}, False)):
        tgt = make_target(target)
        assert dot_bf16.has_feature(tgt) is dot
        padded = padded_model(model, tgt)
        base = recipes.resolve(padded, tgt, None)
        made = recipes.for_target(recipes.with_precision(base, "bf16"), tgt)
        assert made.bf16_dot is dot and made.precision == "bf16"
        later = recipes.with_precision(base, "bf16")           # the target not known yet
        assert not later.bf16_dot and recipes.for_target(later, tgt).bf16_dot is dot
        assert recipes.for_target(made, tgt) is made
    # steps recipes get an optional dot_bf16 step before store_bf16; knob choices survive
    steps = recipes.Recipe("mine", steps=({"primitive": "pack", "args": {"weight": "U", "tile": 16}},),
                           knobs={"t": [16, 8]})
    made = recipes.for_target(recipes.with_precision(steps.with_knobs(t=8), "bf16"), make_target(COOPER))
    assert [s["primitive"] for s in made.steps][-2:] == ["dot_bf16", "store_bf16"]
    assert made.steps[-2]["optional"] and made.chosen == {"t": 8}
    assert recipes.for_target(made, make_target(NO_BF16)).steps[-1]["primitive"] == "store_bf16"
    assert "dot_bf16" not in [s["primitive"] for s in recipes.for_target(made, make_target(NO_BF16)).steps]
    # a recipe written with its own bf16 steps is applied as written
    mine = recipes.Recipe("mine", steps=({"primitive": "store_bf16", "args": {}},))
    assert recipes.for_target(mine, make_target(COOPER)) is mine
    # and the compiled model says which: no vdpbf16ps for a CPU without it
    compiled = model.compile(target=NO_BF16, precision="bf16")
    assert "dot_bf16" not in [s["primitive"] for s in compiled.trace]
    assert "vdpbf16ps" not in compiled.executable.mod.inspect_source("asm")


def test_forcing_vdpbf16ps_on_a_cpu_without_it_is_refused(sst):
    _, V = sst
    model = ct.models.TreeLSTM(hidden_size=H, vocab_size=V)
    haswell = {"kind": "llvm", "mtriple": "x86_64-linux-gnu", "mcpu": "haswell"}
    rs = _scheduled(model, ZEN4)
    rs.dot_bf16()
    with pytest.raises(ValueError, match="needs a CPU with AVX512_BF16; the target 'haswell' has none"):
        build_module(rs.finalize().module(), make_target(haswell))
    # through compile: a schedule that asks for dot_bf16 itself, built for a CPU without it
    steps = model.compile(target=ZEN4).trace

    def forced(rs):
        for step in steps:
            getattr(rs, step["primitive"])(**step["args"])
        return rs.dot_bf16()
    with pytest.raises(ValueError, match="needs a CPU with AVX512_BF16; the target 'skylake-avx512' has none"):
        model.compile(target=NO_BF16, schedule=forced, precision="bf16")


def test_errors(sst):
    _, V = sst
    model = ct.models.TreeLSTM(hidden_size=H, vocab_size=V)
    rs = _scheduled(model, ZEN4)
    with pytest.raises(ScheduleError, match="'emb' is not packed"):
        rs.dot_bf16("emb")
    with pytest.raises(ScheduleError, match="the kernel does not read 'W'"):
        rs.dot_bf16("W")                 # only the leaf tables (the parameter transform) read W
    rs.store_bf16("U")
    with pytest.raises(ScheduleError, match="'U' is stored as bfloat16 already"):
        rs.dot_bf16("U")
    with pytest.raises(ScheduleError, match="no packed weight fits"):
        rs.dot_bf16()
    # packed but not register-tiled
    fresh = RecSchedule(padded_model(model, make_target(ZEN4)).lower(specialize_leaves=False))
    fresh.pack("U", tile=16, groups=5)
    with pytest.raises(ScheduleError, match="no tiled GEMM of the kernel reads 'U'"):
        fresh.dot_bf16("U")
    # tiled with 8 lanes (an AVX2 tile): vdpbf16ps takes 16
    fresh.dense_index("gates_sum")
    fresh.dense_index("gates")
    fresh.pad_levels(3)
    fresh.tile_gemm("gates_sum", node_tile=3, column_tile=16, lanes=8)
    with pytest.raises(ScheduleError, match="not 16 vectorized lanes"):
        fresh.dot_bf16("U")
    assert str(_param(fresh.func, "U_packed").dtype) == "float32"     # a refused step changes nothing
    with pytest.raises(ScheduleError, match="dot_bf16: no packed weight fits: U: .*16 vectorized lanes"):
        fresh.dot_bf16()
