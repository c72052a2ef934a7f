"""Denormal floats flushed to zero in every x86 kernel (flush_denormals.py): MXCSR's FTZ and DAZ
bits set on entry to a kernel and to each parallel task, and what the caller had restored after.

A weight that decays to |w| < 1.18e-38 makes every product with it a denormal, which x86 cores
handle in microcode (the level pass's backward 5x slower on Sapphire Rapids).  These tests show
the IR the pass writes and what a compiled model computes from denormal weights: zeros where
numpy, on this thread, computes denormals, and numpy's own results unchanged afterwards."""
import platform

import numpy as np
import pytest
import tvm
from tvm.script import tirx as T

import cortex_tvm as ct
from cortex_tvm import flush_denormals, tir_pipeline
from cortex_tvm.target import make_target

pytestmark = pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="MXCSR is x86's")

#: float32's smallest normal number: below it, a denormal
TINY = np.finfo(np.float32).tiny


def _has_denormals(values) -> bool:
    values = np.abs(np.asarray(values))
    return bool(((values > 0) & (values < TINY)).any())


@T.prim_func
def scale_rows(p_x: T.handle, p_w: T.handle, p_y: T.handle):
    x = T.match_buffer(p_x, (8, 16), "float32")
    w = T.match_buffer(p_w, (16,), "float32")
    y = T.match_buffer(p_y, (8, 16), "float32")
    for step in range(2):
        for row in T.parallel(8):
            for col in range(16):
                y[row, col] = x[row, col] * w[col] * T.float32(step + 1)


def _lowered(func, name, target="llvm"):
    """`func` through TVM's s_tir pipeline (MakePackedAPI included) for `target`."""
    base, _, _ = tvm.tirx.get_tir_pipeline("s_tir")
    tgt = make_target(target)
    return base(tvm.tirx.transform.BindTarget(tgt.with_host(tgt))(tvm.IRModule({name: func})))[name]


def _statements(script: str, keys=("mxcsr", "T.parallel", "compute_scope", "pragma_parallel_launch_point")):
    return [line.strip() for line in script.splitlines() if any(key in line for key in keys)]


def test_the_body_and_each_parallel_task_save_set_and_restore_mxcsr():
    before = _lowered(scale_rows, "scale_rows")
    assert "mxcsr" not in before.script()
    after = flush_denormals.flush_denormals(before)
    saved, flushed = "T.address_of(mxcsr_saved{})", "T.address_of(mxcsr_flushed{})"
    stmxcsr, ldmxcsr = 'T.call_llvm_intrin("void", "llvm.x86.sse.stmxcsr", {})', \
        'T.call_llvm_intrin("void", "llvm.x86.sse.ldmxcsr", {})'
    # the function's own body, after MakePackedAPI's argument checks; inside it, the parallel
    # loop within a launch point, which codegen runs once per task around the task's rows
    want = [
        'with T.attr({"compute_scope": "scale_rows_compute_"}):',
        "mxcsr_saved: T.int32", "mxcsr_flushed: T.int32", stmxcsr.format(saved.format("")),
        "mxcsr_flushed = mxcsr_saved | 32832", ldmxcsr.format(flushed.format("")),
        'T.attr(0, "pragma_parallel_launch_point", 0)',
        "mxcsr_saved_1: T.int32", "mxcsr_flushed_1: T.int32", stmxcsr.format(saved.format("_1")),
        "mxcsr_flushed_1 = mxcsr_saved_1 | 32832", ldmxcsr.format(flushed.format("_1")),
        "for row in T.parallel(8):",
        ldmxcsr.format(saved.format("_1")),
        ldmxcsr.format(saved.format("")),
    ]
    assert _statements(after.script()) == want
    assert flush_denormals.FLUSH == (1 << 15) | (1 << 6) == 32832
    # once per build: a second run leaves it as it is
    assert flush_denormals.flush_denormals(after).same_as(after)


@T.prim_func
def two_levels(p_y: T.handle):
    # a persistent region (`schedule.persistent_threads`): one launch, a barrier after each level
    y = T.match_buffer(p_y, (8, 16), "float32")
    for level in T.serial(2, annotations={"pragma_parallel_launch_point": 1}):
        for row in T.parallel(8, annotations={"pragma_parallel_barrier_when_finish": 1}):
            for col in range(16):
                y[row, col] = y[row, col] * T.float32(0.1)


def test_a_persistent_region_is_flushed_once_per_task_around_its_levels():
    after = flush_denormals.flush_denormals(_lowered(two_levels, "two_levels"))
    lines = _statements(after.script(), ("mxcsr", "T.parallel", "pragma_parallel", "for level"))
    # the body's own five, then the region's (each task's) around the level loop; the level's
    # parallel loop, already split between the tasks, gets no launch point of its own
    assert lines[5:] == [
        'with T.attr(level, "pragma_parallel_launch_point", 1):',
        "mxcsr_saved_1: T.int32", "mxcsr_flushed_1: T.int32",
        'T.call_llvm_intrin("void", "llvm.x86.sse.stmxcsr", T.address_of(mxcsr_saved_1))',
        "mxcsr_flushed_1 = mxcsr_saved_1 | 32832",
        'T.call_llvm_intrin("void", "llvm.x86.sse.ldmxcsr", T.address_of(mxcsr_flushed_1))',
        "for level in range(2):", 'T.attr(row, "pragma_parallel_barrier_when_finish", 1)', "for row in T.parallel(8):",
        'T.call_llvm_intrin("void", "llvm.x86.sse.ldmxcsr", T.address_of(mxcsr_saved_1))',
        'T.call_llvm_intrin("void", "llvm.x86.sse.ldmxcsr", T.address_of(mxcsr_saved))']
    executable = tvm.compile(tvm.IRModule({"two_levels": two_levels}), target=make_target("llvm"),
                             tir_pipeline=tir_pipeline.NAME)
    y = tvm.runtime.tensor(np.full((8, 16), 1e-37, np.float32))
    executable["two_levels"](y)
    # numpy: 1e-38 after the first level, 1e-39 after the second, both denormal; flushed, 0
    assert _has_denormals(np.float32(1e-37) * np.float32(0.1) * np.float32(0.1))
    np.testing.assert_array_equal(y.numpy(), np.zeros((8, 16), np.float32))


def test_gpu_and_non_x86_functions_are_left_alone():
    aarch64 = {"kind": "llvm", "mtriple": "aarch64-linux-gnu"}
    arm = flush_denormals.flush_denormals(_lowered(scale_rows, "scale_rows", aarch64))
    assert "mxcsr" not in arm.script() and "launch_point" not in arm.script()
    gpu = tvm.tirx.PrimFunc([], tvm.tirx.Evaluate(0)).with_attr("target", tvm.target.Target("cuda"))
    assert flush_denormals.flush_denormals(gpu).same_as(gpu)


def test_the_pipeline_builds_kernels_that_flush_and_restore_the_callers_mode():
    executable = tvm.compile(tvm.IRModule({"scale_rows": scale_rows}), target=make_target("llvm"),
                             tir_pipeline=tir_pipeline.NAME)
    x = np.full((8, 16), 1e-20, np.float32)
    w = np.full(16, 1e-20, np.float32)
    x[:, 0], w[0] = 1e-40, 1e20            # a denormal operand whose product is normal
    y = tvm.runtime.tensor(np.ones((8, 16), np.float32))
    executable["scale_rows"](tvm.runtime.tensor(x), tvm.runtime.tensor(w), y)
    want = x * w * np.float32(2)           # numpy on this thread: 2e-40; 2e-20 in column 0
    assert _has_denormals(want[:, 1:])
    np.testing.assert_allclose(want[:, 0], 2e-20, rtol=1e-4)      # 1e-40 holds 4 or 5 digits
    # every product flushed: DAZ on column 0's denormal operand, FTZ on the others' results
    np.testing.assert_array_equal(y.numpy(), np.zeros((8, 16), np.float32))
    # this thread's own mode is back: numpy still makes denormals
    assert _has_denormals(np.float32(1e-20) * np.float32(1e-20))


def test_the_training_pullback_of_a_model_with_denormal_weights_flushes():
    trees, vocab = ct.data.sst_sample()
    model = ct.models.TreeFC(hidden_size=16, vocab_size=len(vocab), seed=0)
    W = np.sign(model.weights["W"]) * np.float32(1e-42)
    model = model.load_weights({**model.weights, "W": W, "b": np.full(16, 1e-42, np.float32)})
    out, vjp = model.compile(training=True).vjp(trees[:4])
    grads = vjp(np.ones_like(out))
    # each root's h is about 0, so a child of a root gets W^T (1 - h^2) d_h = W^T 1: in numpy,
    # denormals; every leaf's embedding row sums such terms, all flushed here
    assert _has_denormals(W.T @ np.ones(16, np.float32))
    np.testing.assert_array_equal(grads["emb"], np.zeros_like(grads["emb"]))
    # W's gradient sums (1 - h^2) d_h (h_l + h_r) of normal numbers over the nodes: untouched
    assert np.abs(grads["W"]).max() > TINY
    assert _has_denormals(np.float32(1e-20) * np.float32(1e-20))
