"""The compiled backward laid out for a GPU (`adjoint_gpu`), checked without one.

* Its numbers: the GPU function of each part, with every thread loop made serial and the
  barriers dropped, compiled for this CPU and called as on a GPU (`LevelPass._on_device`:
  every array copied to the device and back, the states' second copies excepted).  That
  runs each node's nests in turn and each nest's threads in turn, an order the barriers allow; it gives the numpy backward's gradients for
  every zoo model (SST trees, SST sentences as sequences, grid DAGs whose shared nodes take
  the serial twin), after the training forward and with the recomputation.  Races between
  thread blocks, which a serial run cannot show, are ruled out by the layout: a level's nodes
  write their own rows and their children's, and a tree's child has one parent.
* Its shape: a kernel per level launched from a host loop, nodes on blocks, elements on
  threads, a barrier after each nest.
* Its code: CUDA source, and PTX from nvcc (skips, visibly, without nvcc).
* `compile(training=True, target="cuda")` builds it; `vjp` without a GPU is a clear error.

On a GPU, tests/gpu/test_cuda_run.py runs it against the CPU's gradients.
"""
import re
import shutil

import numpy as np
import pytest
import tvm
import tvm_ffi
from tvm import tirx

import cortex_tvm as ct
from cortex_tvm import tir_pipeline
from cortex_tvm.target import make_target

from .numpy_twin import assert_kept_states, assert_same_gradients, numpy_gradients, zoo_case

H = 6


def as_serial(func):
    """`func` with its thread loops serial and its barriers gone: each nest's threads in turn,
    nest after nest, as the barriers order them."""
    def on_for(loop):
        if loop.kind != tirx.ForKind.THREAD_BINDING:
            return loop
        return tirx.For(loop.loop_var, loop.min, loop.extent, tirx.ForKind.SERIAL, loop.body)

    def on_evaluate(stmt):
        if isinstance(stmt.value, tvm.ir.Call) and stmt.value.op.name == "tirx.tvm_storage_sync":
            return tirx.Evaluate(tirx.const(0, "int32"))
        return stmt
    return func.with_body(tvm_ffi.structural_map(func.body, [(tirx.For, on_for), (tirx.Evaluate, on_evaluate)],
                                                 order="post"))


def _serial_gpu_functions(level_pass):
    """Make `level_pass` (a CPU one) run its parts' GPU functions, serialized, on this CPU, with
    the GPU build's parameters: the CPU's but its weights' copies with widened blocks (a CPU's
    cache lines: `adjoint_copies.Widened`), its transposes plain."""
    built = {}
    _, gpu_params = level_pass.build("forward", True, gpu=True)
    assert [p[:4] for p in gpu_params if p[0] != "transposed"] == [p[:4] for p in level_pass.params
                                                                   if p[0] not in ("transposed", "widened")]
    level_pass.params = gpu_params

    def function(part, parallel):
        if (part, parallel) not in built:
            func, params = level_pass.build(part, parallel, gpu=True)
            assert [p[0] for p in params] == [p[0] for p in level_pass.params]
            assert any(loop.kind == tirx.ForKind.THREAD_BINDING for loop in _loops(func))
            name = str(func.attrs["global_symbol"])
            built[part, parallel] = tvm.compile(tvm.IRModule({name: as_serial(func)}), target=make_target("llvm"),
                                                tir_pipeline=tir_pipeline.NAME)[name]
        return built[part, parallel]
    level_pass.function = function


def _loops(func):
    found = []
    tvm_ffi.structural_walk(func.body, (tirx.For, found.append), order="post")
    return found


@pytest.mark.parametrize("name", sorted(ct.models.BY_NAME))
def test_the_gpu_layout_gives_the_numpy_gradients(name, sst):
    model, lin, states, d_states, compiled = zoo_case(name, H, sst, 6, 2)
    want = numpy_gradients(model, lin, states, d_states)
    _serial_gpu_functions(compiled.level_pass)
    compiled.level_pass.device = tvm.cpu(0)       # every array copied in and back, as to a GPU
    shared = np.bincount(lin.children[lin.children != 0]).max() > 1
    runs = [("all", None)]
    forwarded = compiled.forward(lin, model.weights)
    if forwarded is not None and not shared:      # the GPU forward, then its backward
        kept, token = forwarded
        assert_kept_states(kept, states, lin)
        runs.insert(0, ("backward", token))
    for part, token in runs:
        got = compiled.vjp(lin, states if token is None else kept, model.weights, [d.copy() for d in d_states],
                           forwarded=token)
        assert compiled.level_pass.last_run == (part, "serial" if shared else "parallel")
        assert_same_gradients(got, want, part)


@pytest.fixture(scope="module")
def treelstm_cuda():
    """TreeLSTM compiled for CUDA with its backward (no GPU needed to build)."""
    model = ct.models.TreeLSTM(hidden_size=16, vocab_size=40)
    return model, model.compile(target="cuda", training=True)


def test_the_backward_is_a_kernel_per_level_from_a_host_loop(treelstm_cuda):
    _, compiled = treelstm_cuda
    level_pass = compiled.adjoint.level_pass
    assert level_pass is not None and level_pass.device is not None
    func, _ = level_pass.build("backward", True)
    text = func.script()
    # the levels, top down, on the host; each level's nodes on blocks, as many as the slots
    assert re.search(r"for \w+ in range\(\w+ - 2\):", text), text[:2000]
    blocks = re.findall(r'T\.thread_binding\((\w+), thread="blockIdx\.x"\)', text)
    assert blocks and set(blocks) != {"1"}, blocks
    threads = re.findall(r'T\.thread_binding\((\d+), thread="threadIdx\.x"\)', text)
    assert set(threads) == {"128"}
    assert text.count("T.tvm_storage_sync") >= 4
    # the serial twin (a node shared by two parents): one block, its nodes in turn
    serial, _ = level_pass.build("backward", False)
    level_blocks = re.findall(r'T\.thread_binding\((\w+), thread="blockIdx\.x"\)', serial.script())
    assert blocks[0] != "1" and level_blocks[0] == "1", (blocks, level_blocks)


def test_cuda_source_and_ptx(treelstm_cuda):
    _, compiled = treelstm_cuda
    level_pass = compiled.adjoint.level_pass
    for part in ("forward", "backward"):
        func, _ = level_pass.build(part, True)
        executable = tvm.compile(tvm.IRModule({str(func.attrs["global_symbol"]): func}), target=compiled.target,
                                 tir_pipeline=tir_pipeline.NAME)
        cuda = executable.mod.imports[0].inspect_source()
        kernels = set(re.findall(r'extern "C" __global__ void (?:__launch_bounds__\(\d+\) )?(\w+)\(', cuda))
        assert len(kernels) >= 2, cuda[:1000]
        assert "__syncthreads()" in cuda and "blockIdx.x" in cuda and "threadIdx.x" in cuda
        assert "atomic" not in cuda                    # the adds are ordered, not atomic
        if shutil.which("nvcc") is None:
            pytest.skip("nvcc not found on PATH: the PTX check needs the CUDA toolkit")
        from tvm.support import nvcc
        with compiled.target:
            ptx = bytes(nvcc.compile_cuda(cuda, target_format="ptx", arch="sm_90", compiler="nvcc")).decode()
        assert set(re.findall(r"\.entry (\w+)\(", ptx)) == kernels
        assert "bar.sync" in ptx


def test_vjp_without_a_gpu_says_so(treelstm_cuda):
    if tvm.cuda(0).exist:
        pytest.skip("a GPU is visible: tests/gpu/test_cuda_run.py runs the backward there")
    _, compiled = treelstm_cuda
    tree = ct.data.Node(children=[ct.data.Node(1), ct.data.Node(children=[ct.data.Node(2), ct.data.Node(3)])])
    with pytest.raises(RuntimeError, match="no CUDA device"):
        compiled.vjp([tree])
