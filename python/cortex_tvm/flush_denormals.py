"""Denormal floats flushed to zero in every x86 kernel: the FTZ and DAZ bits of MXCSR set on
entry and restored on exit, in the calling thread and in each parallel task.

Why: Intel cores handle a denormal operand or result (|x| < 1.18e-38 in float32) in microcode,
many cycles an operation (a Zen 4 showed no slowdown on the same run).  Training meets them: a
weight that gets no gradient decays under weight decay toward zero (ChildSumTreeLSTM on SST,
whose inner nodes have no words, leaves W_f so: 1e-41 after 90 Adagrad steps) and every product
with it is denormal; the level pass's backward then took 27-29 ms a call instead of 5.6-6.0 on a
Sapphire Rapids core (docs/bench-2026-12-06/intel-panels/denormals.txt).  PyTorch leaves them
on by default (`torch.set_flush_denormal`); TensorFlow flushes them around every op on the CPU
(`ScopedFlushDenormal`), and so do we, around every kernel: results change only where a value
falls below 1.18e-38, which then reads as 0.

MXCSR is per thread, and TVM runs a parallel loop's tasks on its pool's threads, so a
function's body sets the bits for the caller's thread and each parallel loop, in a launch point,
for each task's thread (a persistent region, already a launch point, once around its levels);
each restores what it found, so the caller's numpy and PyTorch keep their own mode.  A GPU
function, a C-source build and a non-x86 CPU are left as they are.

Before (after TVM's s_tir pipeline, MakePackedAPI's argument checks left out)::

    with T.attr({"compute_scope": "f_compute_"}):
        for i in T.parallel(n):
            y[i] = x[i] * w[i]

after (32832 = FLUSH: FTZ, bit 15, and DAZ, bit 6)::

    with T.attr({"compute_scope": "f_compute_"}):
        mxcsr_saved: T.int32
        mxcsr_flushed: T.int32
        T.call_llvm_intrin("void", "llvm.x86.sse.stmxcsr", T.address_of(mxcsr_saved))
        mxcsr_flushed = mxcsr_saved | 32832
        T.call_llvm_intrin("void", "llvm.x86.sse.ldmxcsr", T.address_of(mxcsr_flushed))
        T.attr(0, "pragma_parallel_launch_point", 0)     # what follows runs once in each task
        (the same five statements, named mxcsr_saved_1, mxcsr_flushed_1)
        for i in T.parallel(n):                          # this task's share of i
            y[i] = x[i] * w[i]
        T.call_llvm_intrin("void", "llvm.x86.sse.ldmxcsr", T.address_of(mxcsr_saved_1))
        T.call_llvm_intrin("void", "llvm.x86.sse.ldmxcsr", T.address_of(mxcsr_saved))

Its cost, two ldmxcsr and a stmxcsr in each task: -6 to 37 ns a parallel launch by the fastest
of 300 calls, a launch itself taking 0.64-0.74 us (Zen 4, 2 threads;
docs/bench-2026-12-06/amd-flush/launch_cost.txt).
"""
from __future__ import annotations

import tvm
import tvm_ffi

from .target import X86_ARCHES, triple_of

#: MXCSR's flush-to-zero (bit 15: denormal results become 0) and denormals-are-zero (bit 6:
#: denormal operands read as 0) bits
FLUSH = 0x8000 | 0x0040
#: the function attribute that marks a function already wrapped (the pass runs once per build)
FLUSHED = "cortex_tvm.flush_denormals"
#: the attribute TVM's MakePackedAPI wraps a function's body in (LLVM codegen makes it a function)
COMPUTE_SCOPE = "compute_scope"
#: TVM's pragma whose body LLVM codegen runs once per parallel task, its parallel loop split
#: between the tasks inside
LAUNCH_POINT = "pragma_parallel_launch_point"


def _on_x86(func) -> bool:
    target = func.attrs.get("target") if func.attrs is not None else None
    if target is None or target.kind.name != "llvm":
        return False
    return triple_of(target).startswith(X86_ARCHES)


def _mxcsr(name: str, slot) -> tvm.tirx.Stmt:
    return tvm.tirx.Evaluate(tvm.tirx.call_llvm_intrin("void", f"llvm.x86.sse.{name}",
                                                       tvm.tirx.address_of(tvm.tirx.BufferLoad(slot, [0]))))


def _flushed(body: tvm.tirx.Stmt) -> tvm.tirx.Stmt:
    """body between saving MXCSR and setting FLUSH, and restoring what was saved."""
    saved = tvm.tirx.decl_buffer((1,), "int32", name="mxcsr_saved")
    flushed = tvm.tirx.decl_buffer((1,), "int32", name="mxcsr_flushed")
    return tvm.tirx.SeqStmt([
        tvm.tirx.AllocBuffer(saved), tvm.tirx.AllocBuffer(flushed), _mxcsr("stmxcsr", saved),
        tvm.tirx.BufferStore(flushed, tvm.tirx.bitwise_or(tvm.tirx.BufferLoad(saved, [0]),
                                                          tvm.tirx.IntImm("int32", FLUSH)), [0]),
        _mxcsr("ldmxcsr", flushed), body, _mxcsr("ldmxcsr", saved)])


def flush_denormals(func):
    """`func` with FTZ and DAZ set around its body and in each parallel task (an x86 CPU
    function; any other, or one already wrapped, is returned as it is).  See the module's
    docstring for the IR before and after."""
    if not _on_x86(func) or (func.attrs is not None and FLUSHED in func.attrs):
        return func

    # a persistent region (`schedule.persistent_threads`) is already a launch point: its body runs
    # once in each task, around its levels' parallel loops, which stay as they are
    in_regions = []

    def on_region(attr):
        if attr.attr_key == LAUNCH_POINT:
            tvm_ffi.structural_walk(attr.body, (tvm.tirx.For, lambda loop: in_regions.append(loop.loop_var)))
    tvm_ffi.structural_walk(func.body, (tvm.tirx.AttrStmt, on_region))

    def on_for(loop):
        if loop.kind != tvm.tirx.ForKind.PARALLEL or any(loop.loop_var.same_as(v) for v in in_regions):
            return loop
        # a launch point's body runs once in each task, around the task's share of the loop
        zero = tvm.tirx.IntImm("int32", 0)
        return tvm.tirx.AttrStmt(zero, LAUNCH_POINT, zero, _flushed(loop))

    def on_attr(attr):
        # MakePackedAPI puts the function's own body in a "compute_scope" after the argument
        # checks and before its return: wrapped there, a failed check leaves MXCSR alone
        if attr.attr_key not in (COMPUTE_SCOPE, LAUNCH_POINT):
            return attr
        return tvm.tirx.AttrStmt(attr.node, attr.attr_key, attr.value, _flushed(attr.body))
    # (the scopes first: the launch points made for loops are not wrapped twice)
    func = tvm_ffi.structural_map(func, [(tvm.tirx.AttrStmt, on_attr)], order="post")
    func = tvm_ffi.structural_map(func, [(tvm.tirx.For, on_for)], order="post")
    return func.with_attr(FLUSHED, True)


@tvm.tirx.transform.prim_func_pass(opt_level=0, name="cortex_tvm.FlushDenormals")
def FlushDenormals(func, mod, ctx):        # noqa: N802 - TVM's pass naming
    return flush_denormals(func)
