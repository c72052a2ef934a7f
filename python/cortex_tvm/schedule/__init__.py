"""RecSchedule: schedule primitives for recursive programs, on top of TVM's s_tir.Schedule.

The lowered program has stage scopes (`leaves`, and `level` inside the
serial level loop) holding one block per RA compute.  RecSchedule adds the
recursion-specific primitives (families in program.py, layout.py, bf16.py, levels.py, tiles.py,
loops.py, vectors.py, kernels.py, gpu.py); every `tvm.s_tir.Schedule` primitive is reachable on the same
object (`rs.split`, `rs.get_loops`, ...) and applies to the blocks inside.  What the families
may rely on and must declare (their state, a primitive one replaces in another) is state.py's.
"""
import tvm

from .. import level_tails as _tails
from ..check_kernel import check_function
from ..lower import FUNC_NAME
from ..plan import CHECK_FUNC
from .bf16 import Bf16Primitives
from .core import RecScheduleCore, RuntimePlan, ScheduleError, Step
from .gpu import GpuPrimitives
from .kernels import KernelPrimitives, persistent_region, split_per_level
from .layout import LayoutPrimitives
from .levels import LevelPrimitives
from .loops import LoopPrimitives
from .program import ProgramPrimitives
from .tiles import TilePrimitives
from .vectors import VectorPrimitives

__all__ = ["RecSchedule", "RuntimePlan", "ScheduleError", "Step", "split_per_level"]


class RecSchedule(GpuPrimitives, ProgramPrimitives, LayoutPrimitives, Bf16Primitives, LevelPrimitives, TilePrimitives,
                  LoopPrimitives, VectorPrimitives, KernelPrimitives, RecScheduleCore):
    """A schedule of a lowered recursive program (see the module docstring)."""

    def build(self, model, target="llvm"):
        """Build this schedule with `model`'s current weights: a callable CompiledModel.

        The staged path for TIR work: ``rs = RecSchedule(model.lower(specialize_leaves=False))``, any
        primitives, then ``compiled = rs.build(model)``; ``compiled(trees)``.
        """
        return model.build(self, target)

    def module(self) -> "tvm.IRModule":
        """The IRModule to build: the kernel (split into leaves / level / roots functions with
        `per_level_kernels`), the parameter transforms beside it when there are any, and on a
        CPU the compiled bounds check (`check_kernel`) that `run(lin)` calls."""
        functions = self._functions()
        kernel = functions.pop(FUNC_NAME)
        mod = split_per_level(kernel, self.lowered.first_level) if self.plan.per_level \
            else tvm.IRModule({FUNC_NAME: kernel})
        for name, func in functions.items():
            mod[name] = func
        if not self.bound_scopes and self.persistent_blocks is None:      # a CPU module
            mod[CHECK_FUNC] = check_function()
        return mod

    def finalize(self):
        """Split reduction inits off tiled blocks (s_tir requires this after `parallel`); with
        `level_tails`, join each tail's parallel stage into the whole tiles' loop; with
        `persistent_threads`, give every stage scheduled since then its barrier.

        Called by the build; idempotent.
        """
        for block, loop_position in self._pending_decompose:
            if self.has_block(block):
                b = self._block(block)
                self.sch.decompose_reduction(b, self.sch.get_loops(b)[loop_position])
        self._pending_decompose = []
        if self.tail_tile > 1:
            self._rewrite(_tails.join_tails)
        if self.persistent_levels:
            self._rewrite(persistent_region)
        return self
