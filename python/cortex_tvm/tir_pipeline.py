"""The TIR pipeline cortex_tvm builds its kernels with: TVM's own, with register tiles kept on the stack
and denormal floats flushed to zero in x86 kernels (`flush_denormals`).

TVM's `LowerTVMBuiltin` turns every CPU allocation of 1 KB or more into a
`TVMBackendAllocWorkspace` call, a register tile's accumulators included.
LLVM cannot promote heap memory to registers, so every FMA then loads and
stores its accumulator and the micro-kernel runs about 3x slower.  1 KB is
16 AVX-512 vectors, half the register file: a GEMM tile of 4 nodes x 5 LSTM
gates (20 accumulators, 1280 B) would go to the heap.

After TVM's s_tir pipeline, `keep_tiles_on_stack` marks each constant-size
allocation of at most `STACK_TILE_BYTES` in a CPU function with TVM's own
`disable_lower_builtin` annotation, which `LowerTVMBuiltin` honours: it
stays an `alloca`, and LLVM keeps it in registers when every access is at a
constant index after unrolling.

A kernel whose levels end in tails (`level_tails`) carries the function
attribute `SEPARATE_TILES`; such a module is lowered without TVM's
StorageRewrite, which would fold the tails' register tiles and the whole
tiles' into one stack array that LLVM no longer promotes to registers
(TreeLSTM H=256 on Zen 5: a level of one node 26 us instead of 13).

    tvm.compile(mod, target, tir_pipeline=tir_pipeline.NAME)

`NAME` is registered with TVM on import, so a Relax module holding our
kernels builds the same way (`relax.build_vm`).
"""
from __future__ import annotations

import tvm
import tvm_ffi
from tvm.tirx import compilation_pipeline

from .flush_denormals import FlushDenormals
from .level_tails import SEPARATE_TILES        # lower the module without StorageRewrite
from .target import STACK_BYTES as STACK_TILE_BYTES
from .target import bytes_of

#: the name `tvm.compile(..., tir_pipeline=NAME)` takes
NAME = "cortex_tvm"
# STACK_TILE_BYTES: the largest register tile the derived schedule plans (the whole AVX-512
# register file); a larger constant allocation (a level scratchpad) stays on TVM's allocator
#: TVM's annotation (`tirx::transform::kDisableLowerTVMBuiltin`) that keeps an allocation an alloca
DISABLE_LOWER_BUILTIN = "disable_lower_builtin"
#: TVM's PassContext option that skips StorageRewrite
_NO_STORAGE_REWRITE = "tirx.disable_storage_rewrite"


def _bytes(buffer):
    """The buffer's size in bytes when its shape is constant, else None."""
    count = 1
    for extent in buffer.shape:
        if not isinstance(extent, tvm.tirx.IntImm):
            return None
        count *= int(extent.value)
    return count * bytes_of(buffer.dtype)


def _on_cpu(func) -> bool:
    target = func.attrs.get("target") if func.attrs is not None else None
    return target is not None and target.kind.name in ("llvm", "c")


def keep_tiles_on_stack(func):
    """`func` with each constant-size global allocation of at most STACK_TILE_BYTES marked
    `disable_lower_builtin` (a CPU function; any other is returned as it is).

    Before (after TVM's s_tir pipeline, a 5 x 5 TreeLSTM tile of 16 lanes, 1600 B)::

        gates_sum = T.alloc_buffer((5, 5, 16))

    after::

        gates_sum = T.alloc_buffer((5, 5, 16), annotations={"disable_lower_builtin": T.bool(True)})

    so LowerTVMBuiltin leaves it an alloca instead of a TVMBackendAllocWorkspace call."""
    if not _on_cpu(func):
        return func

    def on_alloc(alloc):
        size = _bytes(alloc.buffer)
        if alloc.buffer.scope() != "global" or size is None or size > STACK_TILE_BYTES:
            return alloc
        if DISABLE_LOWER_BUILTIN in alloc.annotations:
            return alloc
        return tvm.tirx.AllocBuffer(alloc.buffer, {**alloc.annotations,
                                                   DISABLE_LOWER_BUILTIN: tvm.tirx.IntImm("bool", 1)})
    return tvm_ffi.structural_map(func, [(tvm.tirx.AllocBuffer, on_alloc)], order="post")


def _separate_tiles(func) -> bool:
    attrs = getattr(func, "attrs", None)
    return attrs is not None and bool(attrs.get(SEPARATE_TILES, False))


@tvm.tirx.transform.prim_func_pass(opt_level=0, name="cortex_tvm.KeepTilesOnStack")
def KeepTilesOnStack(func, mod, ctx):        # noqa: N802 - TVM's pass naming
    return keep_tiles_on_stack(func)


def _pipeline():
    """TVM's s_tir pipeline followed by FlushDenormals and KeepTilesOnStack, with TVM's finalization passes."""
    base, finalize_host, finalize_device = compilation_pipeline.get_tir_pipeline("s_tir")

    @tvm.transform.module_pass(opt_level=0, name="cortex_tvm.pipeline")
    def pipeline(mod, ctx):
        if not any(_separate_tiles(f) for f in mod.functions.values()):
            return KeepTilesOnStack(FlushDenormals(base(mod)))
        config = {**ctx.config, _NO_STORAGE_REWRITE: True}
        with tvm.transform.PassContext(opt_level=ctx.opt_level, config=config,
                                       required_pass=list(ctx.required_pass), disabled_pass=list(ctx.disabled_pass)):
            return KeepTilesOnStack(FlushDenormals(base(mod)))
    return pipeline, finalize_host, finalize_device


compilation_pipeline.register_tir_pipeline(NAME, _pipeline)
