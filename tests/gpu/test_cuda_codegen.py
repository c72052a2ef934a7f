"""CUDA code generation, checked without a GPU: source structure and PTX (nvcc, sm_90) structure.

Runs on any machine with TVM; the PTX checks skip (visibly) without nvcc.  The GPU primitives'
IR before and after, and their refusals, are tests/schedule/test_bind_nodes.py,
test_bind_packs.py and test_single_kernel.py.
"""
from __future__ import annotations

import re
import shutil
from concurrent.futures import ThreadPoolExecutor

import pytest
import tvm

import cortex_tvm as ct

from _gpu_common import MODELS, STRATEGIES, compile_cuda, kernel_definitions

CASES = [(m, s) for m in MODELS for s in STRATEGIES]


@pytest.fixture(scope="module")
def compiled():
    """(model name, strategy) -> (model, CompiledModel, CUDA source); compiled once per module."""
    out = {}
    for name, strategy in CASES:
        model, c = compile_cuda(name, strategy)
        out[name, strategy] = (model, c, c.inspect_source())
    return out


def _ptx(target, source):
    from tvm.support import nvcc
    with target:
        return bytes(nvcc.compile_cuda(source, target_format="ptx", arch="sm_90", compiler="nvcc")).decode()


@pytest.fixture(scope="module")
def ptx(compiled):
    """(model name, strategy) -> PTX text, nvcc runs in parallel (each takes several seconds)."""
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc not found on PATH: PTX structure checks need the CUDA toolkit")
    with ThreadPoolExecutor(max_workers=4) as pool:
        futures = {key: pool.submit(_ptx, c.target, src) for key, (_, c, src) in compiled.items()}
        return {key: f.result() for key, f in futures.items()}


#: kernels of the parameter transform function: one per packed weight (TreeFC: W; TreeLSTM: U, W)
#: and, with hoist, the leaf tables (one word per thread block)
TRANSFORM_KERNELS = {"TreeFC": 1, "TreeLSTM": 3}


def _split_kernels(names):
    """(the inference's kernels, the parameter transforms' kernels)."""
    transforms = [n for n in names if n.startswith("cortex_transform_params_kernel")]
    return [n for n in names if n not in transforms], transforms


# ------------------------------------------------------------------------------ CUDA source
@pytest.mark.parametrize("name,strategy", CASES)
def test_compiles_to_cuda_source(compiled, name, strategy):
    _, c, src = compiled[name, strategy]
    assert c.target.kind.name == "cuda"
    assert c.recipe_name == f"{name.lower()}_cuda"
    assert "extern \"C\" __global__" in src
    assert "blockIdx.x" in src and "threadIdx.x" in src


@pytest.mark.parametrize("name", MODELS)
def test_per_level_source_structure(compiled, name):
    _, c, src = compiled[name, "per_level"]
    assert c.plan.per_level
    kernels, transforms = _split_kernels(kernel_definitions(src))
    assert sorted(kernels) == ["cortex_leaves_kernel", "cortex_level_kernel", "cortex_roots_kernel"]
    assert len(transforms) == TRANSFORM_KERNELS[name]
    assert "grid_sync" not in src and "cooperative_groups" not in src
    level = src[src.index("cortex_level_kernel(", src.index("cortex_level_kernel(") + 1):]
    level = level[:level.index("\n}\n")]
    # the level is a kernel argument; the node index is guarded by the level's size
    assert "int level" in level
    assert re.search(r"\(\(int\)blockIdx\.x\) < \(level_offsets_ptr\[\(level \+ 1\)\] - level_offsets_ptr\[level\]\)",
                     level), level[:2000]
    # per-node scratchpad in shared memory, barriers between the stages of a node
    assert "__shared__" in level and "__syncthreads()" in level
    # the grid size is host-known: max_level_size is a scalar kernel argument
    assert "int max_level_size" in level


@pytest.mark.parametrize("name", MODELS)
def test_single_kernel_source_structure(compiled, name):
    model, c, src = compiled[name, "single"]
    assert not c.plan.per_level
    kernels, transforms = _split_kernels(kernel_definitions(src))
    assert kernels == ["cortex_main_kernel"] and len(transforms) == TRANSFORM_KERNELS[name]
    assert "#include <cooperative_groups.h>" in src and "cg::this_grid().sync()" in src
    body = src[src.index("cortex_main_kernel(", src.index("cortex_main_kernel(") + 1):]
    # one barrier after the leaves and one per level: two call sites
    assert body.count("tvm_builtin_cuda_grid_sync();") == 2
    # grid-stride loops over nodes, guarded by the level size and by max_level_size
    assert re.search(r"\* 132\) \+ \(\(int\)blockIdx\.x\)\) < \(level_offsets_ptr\[", body)
    assert "for (int v = 0; v < (num_levels_plus_1 - 2); ++v)" in body


@pytest.mark.parametrize("name", MODELS)
def test_single_kernel_has_cooperative_launch_attribute(name):
    from cortex_tvm import build
    model = getattr(ct.models, name)(hidden_size=64, vocab_size=100)
    from _gpu_common import recipe
    rs, _ = build.schedule_model(model, build.make_target("cuda"), recipe(name, "single"))
    assert list(rs.func.attrs["tirx.kernel_launch_params"]) == ["blockIdx.x", "threadIdx.x",
                                                                "tirx.use_cooperative_launch"]


def test_weights_are_read_coalesced(compiled):
    """pack() in the CUDA recipes puts the thread index innermost in weight reads."""
    for key in (("TreeLSTM", "single"), ("TreeFC", "per_level")):
        src = compiled[key][2]
        weight = "U_packed_ptr" if key[0] == "TreeLSTM" else "W_packed_ptr"
        reads = re.findall(weight + r"\[(.*?)\]", src)
        assert reads and all(r.endswith("+ ((int)threadIdx.x))") for r in reads), reads


# ------------------------------------------------------------------------------ PTX
@pytest.mark.parametrize("name,strategy", CASES)
def test_ptx_structure(ptx, name, strategy):
    text = ptx[name, strategy]
    entries, transforms = _split_kernels(re.findall(r"\.entry\s+(\w+)", text))
    assert len(transforms) == TRANSFORM_KERNELS[name]
    if strategy == "per_level":
        assert sorted(entries) == ["cortex_leaves_kernel", "cortex_level_kernel", "cortex_roots_kernel"]
        assert "atom.add.release.gpu" not in text
    else:
        assert entries == ["cortex_main_kernel"]
        # cooperative-groups grid barrier: arrive with a release atomic, wait with acquire loads
        assert "atom.add.release.gpu" in text and "ld.acquire.gpu" in text
    assert ".target sm_90" in text
    assert "%ctaid.x" in text and "%tid.x" in text
    assert "bar.sync" in text or "barrier.sync" in text      # __syncthreads between stages
    assert ".shared" in text


# ------------------------------------------------------------------------------ behaviour
def test_call_without_gpu_raises_clear_error(compiled):
    if tvm.cuda(0).exist:
        pytest.skip("a CUDA device is present; tests/gpu/test_cuda_run.py runs the kernels")
    _, c, _ = compiled["TreeFC", "per_level"]
    tree = ct.data.Node(children=[ct.data.Node(word=1), ct.data.Node(word=2)])
    with pytest.raises(RuntimeError, match="no CUDA device"):
        c([tree])


def test_a_cuda_export_without_a_cuda_runtime_is_a_clear_error(compiled, tmp_path):
    """TVM's loader stopped with "Library binary was created using {cuda} but a loader of that
    name is not registered"; load says what the export holds and what it needs first."""
    if tvm.runtime.enabled("cuda"):
        pytest.skip("TVM's CUDA runtime is loaded here; tests/gpu/test_cuda_run.py loads and runs CUDA code")
    _, c, _ = compiled["TreeFC", "per_level"]
    c.export(tmp_path / "cuda")
    with pytest.raises(ValueError, match="holds CUDA code, and TVM's CUDA runtime is not available here"):
        ct.load(tmp_path / "cuda")


def test_default_cuda_compile_uses_persistent_kernel():
    model = ct.models.TreeFC(hidden_size=32, vocab_size=50)
    c = model.compile(target="cuda")
    assert c.recipe_name == "treefc_cuda"
    assert kernel_definitions(c.inspect_source()) == ["cortex_main_kernel"]


def test_the_persistent_grid_is_one_block_per_sm_of_the_visible_gpu(monkeypatch):
    """Without a visible GPU the recipe's default grid (132, an H100/H200) stays; with one, its
    multiprocessor count is the grid (here a GPU of 78 SMs is pretended); a chosen grid wins."""
    from cortex_tvm import compiler
    model = ct.models.TreeFC(hidden_size=32, vocab_size=50)

    def grid(compiled):
        (step,) = [s for s in compiled.trace if s["primitive"] == "single_kernel"]
        return step["args"]["blocks"]
    monkeypatch.setattr(compiler, "cuda_sm_count", lambda: None)
    assert grid(model.compile(target="cuda")) == 132
    monkeypatch.setattr(compiler, "cuda_sm_count", lambda: 78)
    assert grid(model.compile(target="cuda")) == 78
    chosen = ct.recipes.shipped()["treefc_cuda"].with_knobs(grid=66)
    assert grid(model.compile(target="cuda", schedule=chosen)) == 66
