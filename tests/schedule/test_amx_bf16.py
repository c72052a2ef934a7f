"""`amx_bf16`: the GEMMs `dot_bf16` put on `vdpbf16ps` run on Intel AMX tiles, 16 nodes at a time.

Checked: the IR before and after (the node loop becomes blocks of up to 16 nodes with the tile
configuration, one state tile load per 16 pairs, a weight tile load and `tdpbf16ps` per column
vector, more than six column vectors in several passes, the epilogue per node of the block);
the assembly for Sapphire Rapids (built on any x86 host, never run there); the choice
`recipes` makes by target; the errors (no dot_bf16 before it, a node tile above 1, the rounding
at each use, a build for a CPU without AMX); and, where this CPU has AMX (skipped, visibly,
elsewhere), every zoo model against float64, TreeLSTM against the `vdpbf16ps` kernel on levels
wider than one block of 16, and an export loaded and run in a fresh process.
"""
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import cortex_tvm as ct
from cortex_tvm import amx_bf16, amx_bf16_kernel, recipes
from cortex_tvm.bench.cases import OPTIONS, structures
from cortex_tvm.compile_cache import build_module
from cortex_tvm.compiler import padded_model
from cortex_tvm.models import reference64
from cortex_tvm.schedule import RecSchedule, ScheduleError
from cortex_tvm.target import host_isa, host_llvm, make_target

H = 32
SAPPHIRE = {"kind": "llvm", "mtriple": "x86_64-linux-gnu", "mcpu": "sapphirerapids"}
COOPER = {"kind": "llvm", "mtriple": "x86_64-linux-gnu", "mcpu": "cooperlake"}
HASWELL = {"kind": "llvm", "mtriple": "x86_64-linux-gnu", "mcpu": "haswell"}

needs_amx_cpu = pytest.mark.skipif(
    not set(amx_bf16.FEATURES) <= host_isa(),
    reason="runs tdpbf16ps: this CPU has no AMX-BF16 (Intel Sapphire Rapids and later); the IR, assembly "
           "and error tests still ran")


@pytest.fixture(scope="module")
def sst():
    trees, vocab = ct.data.sst_sample()
    return trees, len(vocab)


def _until_amx(model, target=SAPPHIRE, knobs=None):
    """A fresh RecSchedule of `model` with the bf16 compile's steps for `target` replayed up to
    amx_bf16 (the steps after it returned)."""
    tgt = make_target(target)
    padded = padded_model(model, tgt)
    recipe = recipes.for_target(recipes.with_precision(recipes.resolve(padded, tgt, None), "bf16"), tgt)
    if knobs:
        recipe = recipe.with_knobs(**knobs)
    compiled = model.compile(target=tgt, schedule=recipe, precision="bf16")
    steps = [s["primitive"] for s in compiled.trace]
    rs = RecSchedule(padded.lower(specialize_leaves=False))
    cut = steps.index("amx_bf16") if "amx_bf16" in steps else steps.index("store_bf16")
    for step in compiled.trace[:cut]:
        getattr(rs, step["primitive"])(**step["args"])
    return rs, compiled


def _kernel(rs):
    return rs.script().split("def cortex_transform_params")[0]


# -- IR -------------------------------------------------------------------------------------

def test_ir_before_and_after(sst):
    _, V = sst
    rs, _ = _until_amx(ct.models.TreeLSTM(hidden_size=H, vocab_size=V), knobs={"max_column_vectors": 1})
    before = _kernel(rs)
    assert before.count('"cortex_dpbf16ps"') == 1 and 'T.sblock("gates_sum_init")' in before
    assert "tdpbf16ps" not in before and not rs.plan.amx
    rs.amx_bf16()
    after = _kernel(rs)
    assert rs.plan.amx and "cortex_dpbf16ps" not in after and 'T.sblock("gates_sum_init")' not in after
    assert "for amx_block in range((level_offsets[v_1 + 1] - level_offsets[v_1] + 15) // 16):" in after
    assert "amx_rows: T.let[T.int32] = T.min(16, level_offsets[v_1 + 1] - level_offsets[v_1] - amx_block * 16)" \
        in after
    assert after.count('"llvm.x86.ldtilecfg"') == 1 and after.count("T.Cast(\"uint8\", amx_rows)") == 7
    # five gates of one 16-column vector: five accumulator tiles, one A load per 16 pairs
    assert after.count('"llvm.x86.tilezero"') == 5 and after.count('"llvm.x86.tdpbf16ps"') == 5
    assert after.count('"llvm.x86.tileloadd64", T.uint8(6)') == 1
    assert after.count('"llvm.x86.tileloadd64", T.uint8(7)') == 5
    assert after.count('"llvm.x86.tilestored64"') == 5
    # H = 32, two children: 32 pairs a node, two chunks of 16; U's pair rows 5 x 16 columns apart
    assert "for amx_chunk in range(2):" in after and "T.int64(320)" in after
    assert "for amx_node in range(amx_rows):" in after and 'T.sblock("internal_h")' in after


def test_more_column_vectors_than_tiles_take_several_passes(sst):
    _, V = sst
    rs, _ = _until_amx(ct.models.TreeLSTM(hidden_size=H, vocab_size=V), knobs={"max_column_vectors": 2})
    rs.amx_bf16()
    after = _kernel(rs)
    # 2 column vectors x 5 gates = 10 accumulators: a pass of 6 tiles, then one of 4
    assert after.count('"llvm.x86.tilezero"') == 10 and after.count('"llvm.x86.tdpbf16ps"') == 10
    assert after.count('"llvm.x86.tileloadd64", T.uint8(6)') == 2
    assert after.count('"llvm.x86.tilezero", T.uint8(5)') == 1 and 'T.uint8(6), T.uint8(6)' not in after


def test_assembly_has_tdpbf16ps(sst):
    """Compiled for Sapphire Rapids by precision="bf16" itself (not run: any x86 host builds it)."""
    _, V = sst
    model = ct.models.TreeLSTM(hidden_size=H, vocab_size=V)
    compiled = model.compile(target=SAPPHIRE, precision="bf16")
    assert [s["primitive"] for s in compiled.trace][-3:] == ["dot_bf16", "amx_bf16", "store_bf16"]
    assert compiled.plan.amx and compiled.precision == "bf16"
    asm = compiled.executable.mod.inspect_source("asm")
    assert asm.count("tdpbf16ps") >= 10 and "ldtilecfg" in asm and "tilestored" in asm
    assert "vdpbf16ps" not in asm


# -- the choice by target, and errors -------------------------------------------------------

def test_recipes_use_tiles_only_where_the_cpu_has_them(sst):
    _, V = sst
    model = ct.models.TreeLSTM(hidden_size=H, vocab_size=V)
    for target, dot, amx in ((SAPPHIRE, True, True), (COOPER, True, False), (HASWELL, False, False)):
        tgt = make_target(target)
        assert amx_bf16.has_feature(tgt) is amx
        base = recipes.resolve(padded_model(model, tgt), tgt, None)
        made = recipes.for_target(recipes.with_precision(base, "bf16"), tgt)
        assert (made.bf16_dot, made.bf16_amx) == (dot, amx)
        assert made.knob_values()["node_tile"] == (1 if amx else base.knob_values()["node_tile"])
        # the same recipe for another CPU is made again from the fp32 one
        assert not recipes.for_target(made, make_target(HASWELL)).bf16_amx
    # steps recipes get optional dot_bf16 and amx_bf16 steps before store_bf16
    steps = recipes.Recipe("mine", steps=({"primitive": "pack", "args": {"weight": "U", "tile": 16}},))
    made = recipes.for_target(recipes.with_precision(steps, "bf16"), make_target(SAPPHIRE))
    assert [s["primitive"] for s in made.steps][-3:] == ["dot_bf16", "amx_bf16", "store_bf16"]
    assert made.steps[-2]["optional"] and made.steps[-3]["args"] == {"round_once_only": True}
    # a node tile the user chose is kept: amx_bf16 does not fit it, and vdpbf16ps multiplies
    tgt = make_target(SAPPHIRE)
    chosen = recipes.resolve(padded_model(model, tgt), tgt, None).with_knobs(node_tile=3)
    compiled = model.compile(target=tgt, schedule=recipes.with_precision(chosen, "bf16"), precision="bf16")
    kinds = [s["primitive"] for s in compiled.trace]
    assert "dot_bf16" in kinds and "amx_bf16" not in kinds and not compiled.plan.amx


def test_errors(sst):
    _, V = sst
    model = ct.models.TreeLSTM(hidden_size=H, vocab_size=V)
    rs, _ = _until_amx(model)
    fresh = RecSchedule(padded_model(model, make_target(SAPPHIRE)).lower(specialize_leaves=False))
    with pytest.raises(ScheduleError, match=r"amx_bf16: no GEMM of the kernel runs on vdpbf16ps \(apply dot_bf16"):
        fresh.amx_bf16()
    # a node tile of 3: the node loop holds three nodes' updates
    tiled, _ = _until_amx(model, knobs={"node_tile": 3})
    with pytest.raises(ScheduleError, match="node_tile=1"):
        tiled.amx_bf16()
    # the level as one parallel region: no rounding stage before the GEMM
    persistent = RecSchedule(padded_model(model, make_target(SAPPHIRE)).lower(specialize_leaves=False))
    for step in model.compile(target=SAPPHIRE, schedule=recipes.resolve(
            padded_model(model, make_target(SAPPHIRE)), make_target(SAPPHIRE), None).with_knobs(
            node_tile=1)).trace:
        getattr(persistent, step["primitive"])(**step["args"])
    persistent.persistent_threads()
    persistent.dot_bf16()
    with pytest.raises(ScheduleError, match="rounds its state pair at each use"):
        persistent.amx_bf16()
    # AMX code built for a CPU without it: a clear error, not SIGILL
    rs.amx_bf16()
    rs.store_bf16()
    with pytest.raises(ValueError, match="need a CPU with AMX-BF16; the target 'cooperlake' has none"):
        build_module(rs.finalize().module(), make_target(COOPER))


def test_a_gemm_that_rounds_at_each_use_stays_storage_only(sst):
    """ChildSum's forget gates take one product per child, so their state operand cannot be rounded
    once per node: precision="bf16" for an AMX CPU leaves U_f storage-only (dot_bf16 with
    round_once_only), and a dot_bf16 of U_f alone with round_once_only is refused by name."""
    _, V = sst
    model = ct.models.ChildSumTreeLSTM(hidden_size=H, vocab_size=V, max_children=4)
    compiled = model.compile(target=SAPPHIRE, precision="bf16")
    steps = {s["primitive"]: s["args"] for s in compiled.trace}
    assert steps["dot_bf16"] == {"weight": None, "round_once_only": True} and compiled.plan.amx
    asm = compiled.executable.mod.inspect_source("asm")
    assert "tdpbf16ps" in asm and "vdpbf16ps" not in asm and "U_f" in compiled.plan.bf16_weights
    # without round_once_only (a CPU with AVX512_BF16 alone), U_f's GEMM is on vdpbf16ps
    assert "vdpbf16ps" in model.compile(target=COOPER, precision="bf16").executable.mod.inspect_source("asm")
    fresh = RecSchedule(padded_model(model, make_target(SAPPHIRE)).lower(specialize_leaves=False))
    for step in compiled.trace[:[s["primitive"] for s in compiled.trace].index("dot_bf16")]:
        getattr(fresh, step["primitive"])(**step["args"])
    with pytest.raises(ScheduleError, match="rounds its state operand at each use .* round_once_only"):
        fresh.dot_bf16("U_f", round_once_only=True)
    fresh.dot_bf16("U_iou", round_once_only=True)          # rounded once per node: fits


# -- numbers (run the kernel) ---------------------------------------------------------------

@needs_amx_cpu
@pytest.mark.parametrize("name", sorted(ct.models.BY_NAME))
def test_zoo_model_against_float64(name, sst):
    trees, V = sst
    model = ct.models.BY_NAME[name](hidden_size=H, vocab_size=V, **OPTIONS.get(name, {}))
    compiled = model.compile(precision="bf16")
    batch = structures(name, trees[:12])
    full = reference64(model, batch)
    err = float(np.abs(np.asarray(compiled(batch), np.float64) - full).max())
    assert 0 < err <= 1e-2 * max(1.0, float(np.abs(full).max())), err
    # every zoo model has a GEMM the tiles take; ChildSum's forget gates (one product per child,
    # rounded at each use) are left storage-only, not put on vdpbf16ps (round_once_only)
    asm = compiled.executable.mod.inspect_source("asm")
    assert compiled.plan.amx and "tdpbf16ps" in asm
    if name == "childsum":
        assert "vdpbf16ps" not in asm and "U_f" in compiled.plan.bf16_weights


@needs_amx_cpu
def test_tiles_compute_what_vdpbf16ps_computes(sst):
    """The same bfloat16 products summed in float32 in another order: equal to ~1e-6, on 60 SST
    trees whose lower levels hold more than 16 nodes (several blocks, the last one partial)."""
    trees, V = sst
    model = ct.models.TreeLSTM(hidden_size=H, vocab_size=V)
    tiles = model.compile(precision="bf16")
    assert tiles.plan.amx
    no_amx = {**host_llvm(), "mattr": host_llvm().get("mattr", []) + ["-amx-bf16", "-amx-int8", "-amx-tile"]}
    dot = model.compile(target=no_amx, precision="bf16")
    assert not dot.plan.amx and "dot_bf16" in [s["primitive"] for s in dot.trace]
    batch = trees[:60]
    lin = tiles.linearize(batch)
    widths = np.diff(np.asarray(lin.level_offsets))
    assert widths.max() > 2 * amx_bf16_kernel.ROWS and (widths % amx_bf16_kernel.ROWS).max() > 0
    a, b = tiles(batch, all_nodes=True), dot(batch, all_nodes=True)
    assert max(float(np.abs(x - y).max()) for x, y in zip(a, b)) <= 1e-5
    assert float(np.abs(tiles(batch) - reference64(model, batch)).max()) <= 1e-2


@needs_amx_cpu
def test_export_runs_in_a_fresh_process(sst, tmp_path):
    """The loader asks Linux for the tile state before the kernel runs (without it the first tile
    instruction kills the process)."""
    trees, V = sst
    model = ct.models.TreeLSTM(hidden_size=H, vocab_size=V)
    compiled = model.compile(precision="bf16")
    path = compiled.export(str(tmp_path / "amx"))
    want = compiled(trees[:10])
    np.save(tmp_path / "want.npy", want)
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(f"""
        import numpy as np, cortex_tvm as ct
        trees, _ = ct.data.sst_sample()
        loaded = ct.load({path!r})
        assert loaded.plan.amx
        np.testing.assert_array_equal(loaded(trees[:10]), np.load({str(tmp_path / "want.npy")!r}))
        print("ran")
    """)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and "ran" in out.stdout, out.stderr[-2000:]
