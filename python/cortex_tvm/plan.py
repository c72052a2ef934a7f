"""What a built kernel needs at run time, shared by the side that compiles it and the side
that runs it: the kernel's function names and the runtime plan.

Imports nothing of either side (no lowering, no schedule), so loading an export
(`runtime`, `export`) never pulls in the compiler.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

#: the kernel, and the parameter transforms beside it in the same module (leaf tables, packed
#: weights), run once when a model is compiled or loaded (Relax's LiftTransformParams, for recursion)
FUNC_NAME = "cortex_main"
TRANSFORM_FUNC = "cortex_transform_params"
#: the three functions of `per_level_kernels`: leaves, one level (called per level), roots
LEAVES_FUNC, LEVEL_FUNC, ROOTS_FUNC = "cortex_leaves", "cortex_level", "cortex_roots"
#: the compiled twin of `linearize.check_bounds` in every CPU module (`check_kernel`)
CHECK_FUNC = "cortex_check"


@dataclass(frozen=True)
class RuntimePlan:
    """What the executor must do for the scheduled kernel to be correct."""

    #: every level's slot range is padded to a multiple of this
    node_tile: int = 1
    #: False: each internal node is its own level step (no dynamic batching)
    dynamic_batching: bool = True
    #: (weight name, axis, tile, groups, extent): the array is repacked the same way at load time
    packs: tuple = ()
    #: states whose leaf values are looked up in a table computed at compile time
    hoisted: tuple = ()
    #: one kernel launch per level instead of one for the whole inference
    per_level: bool = False
    #: build with TVM's loop partitioning (peel)
    partition_loops: bool = False
    #: weights whose packed copy holds bfloat16 bits (store_bf16): the transform writes them
    bf16_weights: tuple = ()
    #: the kernel multiplies on AMX tiles (amx_bf16): the process asks Linux for the tile state
    #: before its first call (`amx_bf16.request_permission`)
    amx: bool = False
    #: recursive unrolling (unroll_recursion): a node computed with its descendants this many
    #: levels down, in one step, on one thread; the linearizer lays out (step, chunk, phase) levels
    recursion_depth: int = 1
    #: the parallel chunks of each unrolled step (the kernel's parallel loop extent)
    recursion_chunks: int = 1

    @property
    def unroll(self):
        """(depth, chunks) for the linearizer and the bounds check, or None when not unrolled."""
        return (self.recursion_depth, self.recursion_chunks) if self.recursion_depth > 1 else None

    def pass_config(self) -> dict:
        return {"s_tir.LoopPartition": {"partition_const_loop": True}} if self.partition_loops else {}

    def with_pack(self, name, axis, tile, groups=1, extent=None):
        return replace(self, packs=tuple(p for p in self.packs if p[0] != name)
                       + ((name, axis, tile, groups, extent),))



def kernel_names(plan: RuntimePlan) -> tuple:
    """The module functions a call runs, in order."""
    return (LEAVES_FUNC, LEVEL_FUNC, ROOTS_FUNC) if plan.per_level else (FUNC_NAME,)
