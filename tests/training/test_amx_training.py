"""compile(training=True, precision="bf16") on a CPU with AMX-BF16: the level pass's whole register
tiles and the weight sums' packed products on AMX tiles (`adjoint_amx`).

* the IR (built on any machine, not run): TreeLSTM h = 38, x = 22 (19 pairs: a step of 16 and a
  rest of 3; 11 pairs: a rest alone; chunks of 32 + 6 and 16 + 6 columns): which tiles read which
  arrays, no `vdpbf16ps` left (a run's rest of nodes on one tile too);
* the numbers, on an AMX CPU: the gradients equal float64 autograd through the eager recursion
  whose products round their inputs to bfloat16, as the `vdpbf16ps` pass's do
  (test_bf16_training.py), at those ragged sizes (a chunk's short last vector once shrank the
  tiles' array under TVM's buffer compaction: wrong sums, NaN);
* the CPU decides: AMX where it has AMX-BF16, `vdpbf16ps` alone elsewhere;
* a process that loads AMX code from the disk cache (CORTEX_TVM_CACHE_DIR: the pass, or the inference
  kernel) asks Linux for the tile state as one that builds it does (it stopped at the first tile
  instruction, SIGILL).
"""
import os
import re
import subprocess
import sys

import numpy as np
import pytest

import cortex_tvm as ct
from cortex_tvm import adjoint_kernel, amx_bf16, dot_bf16, lower
from cortex_tvm.stage_numpy import StageNumpy
from cortex_tvm.target import host_features, host_isa

torch = pytest.importorskip("torch")

from .eager import eager_grads, pullbacks, weight_difference as _difference  # noqa: E402 - needs torch

H, X = 38, 22

needs_amx_cpu = pytest.mark.skipif(
    not set(amx_bf16.FEATURES) <= host_isa(),
    reason="runs AMX tiles: this CPU has no AMX-BF16 (Intel Sapphire Rapids and later); the IR test still ran")


def _pass_text(part, amx=True):
    model = ct.models.TreeLSTM(H, 50, embed_size=X)
    stages = {n: lower.build_stage(model.program, n) for n in ("leaf", "internal")}
    func, _ = adjoint_kernel.level_pass(stages, {n: StageNumpy(s) for n, s in stages.items()}, model.program,
                                        lanes=16, cores=2, part=part, bf16=True, amx=amx)
    return func.script()


def _tile_loads(text) -> set:
    """{(tile register, the array it loads from)}, the pair views named "pairs"."""
    views = set(re.findall(r'(\w+) = \w+\.view\("uint32"\)', text))
    found = re.findall(r'"llvm.x86.tileloadd64", T.uint8\((\d)\), T.address_of\((\w+)\[', text)
    return {(int(tile), "pairs" if name in views else name) for tile, name in found}


def test_the_amx_level_pass_ir():
    forward, backward = _pass_text("forward"), _pass_text("backward")
    # the forward's gates: A (4, and 6 for the rest of the pairs) the nodes' rounded pairs, B (5, 7) U's and W's
    # transposed pair copies: U's 19 pairs a step of 16 and a rest, W's 11 a rest alone
    assert _tile_loads(forward) == {(4, "pairs"), (6, "pairs"), (5, "U_T"), (7, "U_T"), (7, "W_T")}
    # the backward's d h and d emb on the widened copies (19 pairs of dG each)
    loads = _tile_loads(backward)
    assert {(4, "pairs"), (6, "pairs"), (5, "U_panels"), (7, "U_panels"), (5, "W_panels"), (7, "W_panels")} < loads
    # the sums dU, dW: the accumulators (0) loaded from the register tile, A (4) from the row panel (a
    # local array), B (5) from the column panel (TVMScript may name a panel as a pair view of another scope)
    column_panels = set(re.findall(r'(\w+) = T.alloc_buffer\(\(\d+,\), "uint32"\)', backward))
    row_panels = set(re.findall(r'(\w+) = T.alloc_local\(\(\d+,\), "uint32"\)', backward))
    raw = set(re.findall(r'"llvm.x86.tileloadd64", T.uint8\((\d)\), T.address_of\((\w+)\[', backward))
    assert any(("5", name) in raw for name in column_panels) and any(("4", name) in raw for name in row_panels)
    assert any(tile == "0" and name not in column_panels | row_panels for tile, name in raw)
    for text in (forward, backward):
        # each nest on tiles loads its configuration; the run's rest takes tiles too
        assert text.count('"llvm.x86.ldtilecfg"') >= 2 and "cortex_dpbf16ps" not in text
    # ... as one tile of its nodes, whatever their count (`Run.tiles(one_rest=True)`): each chunk of columns of
    # each nest starts its accumulators at two places, the whole tiles' loop and the rest's tile (24 and 20 when
    # the rest took a tile of 1, 2 and 4 nodes each, a whole tile's rows apiece)
    assert (forward.count('"llvm.x86.tilezero"'), backward.count('"llvm.x86.tilezero"')) == (12, 10)
    # (its nodes written)
    assert re.search(r"if (\w+) - (\w+) \* 8 > 0:.*?for \w+ in range\(\1 - \2 \* 8\)", forward, re.S)
    # every accumulator the forward's tiles start from zero is stored into the register tile
    assert forward.count('"llvm.x86.tilestored64"') == forward.count('"llvm.x86.tilezero"') > 0
    vdpbf16ps = _pass_text("forward", amx=False)
    assert "tileloadd64" not in vdpbf16ps and "cortex_dpbf16ps" in vdpbf16ps


@pytest.fixture(scope="module")
def amx_treelstm(sst):
    trees, vocab = sst
    model = ct.models.TreeLSTM(H, len(vocab), seed=5, embed_size=X)
    return trees[:20], model, model.compile(training=True, precision="bf16")


@needs_amx_cpu
@pytest.mark.parametrize("all_nodes", [False, True])
def test_amx_gradients_equal_autograd_of_products_on_bf16_inputs(amx_treelstm, all_nodes):
    trees, model, compiled = amx_treelstm
    assert compiled.adjoint.level_pass.amx
    (got,), loss_of = pullbacks([compiled], trees, H, all_nodes)
    grads = {bf16: eager_grads(model.weights, loss_of, bf16) for bf16 in (True, False)}
    assert all(np.isfinite(g).all() for g in got.values())
    # (4e-5 with the roots' loss, 2.6e-4 with all nodes': the tiles sum in another order than the emulation;
    # 2.7e-3 and 3.3e-3 from the exact gradients)
    assert _difference(got, grads[True]) < 5e-4
    assert _difference(got, grads[False]) > 10 * _difference(got, grads[True])


def test_the_cpu_decides_amx():
    """bf16 training takes the tiles where this CPU has AMX-BF16 (the host target's LLVM model, Sapphire Rapids
    here), `vdpbf16ps` alone elsewhere (Zen 4); float32 never."""
    model = ct.models.TreeLSTM(16, 20)
    assert model.compile(training=True).adjoint.level_pass.amx is False
    if dot_bf16.FEATURE not in host_features():        # (bf16 training needs AVX512_BF16: refused, test_torch_training)
        return
    assert model.compile(training=True, precision="bf16").adjoint.level_pass.amx is (
        set(amx_bf16.FEATURES) <= host_isa())


CACHED_RUNS = {"training": """
import numpy as np, cortex_tvm as ct
trees, vocab = ct.data.sst_sample()
model = ct.models.TreeLSTM(hidden_size=32, vocab_size=len(vocab), seed=0, embed_size=32)
out, vjp = model.compile(training=True, precision="bf16").vjp(trees[:5])
print(float(np.abs(vjp(np.ones_like(out))["U"]).sum()))
""", "inference": """
import numpy as np, cortex_tvm as ct
trees, vocab = ct.data.sst_sample()
model = ct.models.TreeLSTM(hidden_size=64, vocab_size=len(vocab), seed=0)
print(float(np.abs(model.compile(precision="bf16")(trees[:5])).sum()))
"""}


@needs_amx_cpu
@pytest.mark.parametrize("kind", sorted(CACHED_RUNS))
def test_amx_code_from_the_disk_cache_runs(tmp_path, kind):
    """The training pass, and the inference kernel's tiles (`amx_bf16`) alike."""
    env = {**os.environ, "CORTEX_TVM_CACHE_DIR": str(tmp_path)}
    runs = [subprocess.run([sys.executable, "-c", CACHED_RUNS[kind]], env=env, capture_output=True, text=True,
                           timeout=600) for _ in range(2)]
    assert [r.returncode for r in runs] == [0, 0], runs[1].stderr[-2000:]
    assert any(name.endswith(".so") for name in os.listdir(tmp_path))        # (the second run loaded the first's)
    assert float(runs[0].stdout) == float(runs[1].stdout) > 0
