"""Build: a model -> its scheduled program (the recipe fitted, with a fallback) -> CompiledModel.

The stage below `compiler` (which picks the schedule) and above `runtime` (which runs it);
the compiled code itself comes from `compile_cache` (tvm.compile, cached per process and on
disk).
"""
from __future__ import annotations

import warnings

from . import recipes
from .compile_cache import build_module
from .kernel_args import model_weight_arrays
from .runtime import CompiledModel
from .schedule import RecSchedule, ScheduleError
from .target import make_target


def schedule_model(model, target, schedule=None, bf16_dot: bool = True):
    """model -> lowered -> RecSchedule with the recipe applied and finalized.

    A bf16 recipe made by `recipes.with_precision` multiplies with vdpbf16ps (`dot_bf16`)
    where the target's CPU has AVX512_BF16; `bf16_dot=False` keeps it storage-only (for code
    that someone else compiles, for a target this cannot check)."""
    def fresh():
        return RecSchedule(model.lower(specialize_leaves=False))

    # (a Recipe is already resolved: the compile resolves its recipe once)
    recipe = schedule if isinstance(schedule, recipes.Recipe) else recipes.resolve(model, target, schedule)
    if bf16_dot:
        recipe = recipes.for_target(recipe, target)
    elif recipe.bf16_dot:
        recipe = recipes.for_target(recipe, None)
    tried = []

    def kept():                     # fitted's last schedule is the one its recipe applied to
        tried.append(fresh())
        return tried[-1]
    if recipe.knobs:
        try:
            recipe = recipe.fitted(kept)
            return tried[-1].finalize(), recipe
        except ScheduleError as err:
            if schedule is not None:
                raise
            # the model's default recipe does not fit these sizes: the generic one always does
            warnings.warn(f"{err}; using the generic 'auto' schedule", stacklevel=3)
            recipe = recipes.resolve(model, target, "auto")
    rs = fresh()
    recipe.apply(rs)
    return rs.finalize(), recipe


def build_schedule(model, rs, target="llvm", recipe=None, bounds_check: bool = False, state_shapes=None,
                   padding=None):
    """A scheduled program (RecSchedule) + the model's weights -> CompiledModel.

    One module is built for the target: the kernel and the parameter transforms beside it
    (`hoist`'s leaf tables, `pack`'s layouts), which the CompiledModel runs once on the weights.
    `recipe` (a Recipe) only names the result.  padding: when `model` is a padded model, how it
    was padded from the user's (`padding.Padding`, the compile's `ProgramFacts.padding`): the
    result pads weights given in the user's sizes the same way (`CompiledModel.weight_padding`).
    """
    tgt = make_target(target)
    rs.finalize()
    recipe_name = recipe.name if recipe is not None else "custom"
    # (TVM's tirx.instrument_bound_checkers adds nothing to s_tir kernels in 0.27: what guards them
    # is CompiledModel.check, run on every call with bounds_check=True)
    executable = build_module(rs.module(), tgt, rs.plan.pass_config())
    signature = rs.signature
    compiled = CompiledModel(signature, executable, tgt, rs.plan, model_weight_arrays(model, signature),
                             vocab_bound=model.vocab_bound, model_name=type(model).__name__,
                             aliases=getattr(model, "aliases", {}), recipe_name=recipe_name,
                             state_shapes=state_shapes, lowered=rs.lowered,
                             weight_padding=None if padding is None else padding.weight_padding,
                             trace=[step.as_json() for step in rs.trace])
    compiled.bounds_check = bounds_check
    return compiled
