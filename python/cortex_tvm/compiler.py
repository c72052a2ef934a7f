"""The compile entry point: model -> (padded) kernel model -> schedule -> build -> CompiledModel.

The top of the compiling stages and the only one that consults tuning: a tuning log's record
for this model and CPU, else the shipped cost model's choice among a few configurations of
the derived schedule (no measurement), else the recipe named by `schedule`.
"""
from __future__ import annotations

from . import recipes
from .build import build_module, build_schedule, schedule_model
from .padding import compiled_form
from .schedule import split_per_level
from .target import make_target
from .tune.apply import resolve_recipe
from .tune.pretrained import choose


def compile_model(model, target="llvm", schedule=None, tuning_log=None, bounds_check=False):
    """model -> lowered -> scheduled -> built -> CompiledModel.

    bounds_check=True builds with TVM's `tirx.instrument_bound_checkers` and makes `run()`
    validate every index array first (see build.BOUNDS_CHECK): hand-made arrays raise ValueError."""
    if not isinstance(bounds_check, bool):
        raise TypeError(f"bounds_check must be a bool, got {type(bounds_check).__name__}")
    tgt = make_target(target)
    if tuning_log is not None:
        schedule = resolve_recipe(model, tuning_log, tgt, schedule)
    kernel_model = compiled_form(model, tgt)
    if schedule is None and tgt.kind.name == "llvm":
        # the shipped cost model ranks a few configurations of the derived schedule, unmeasured
        schedule = choose(recipes.resolve(kernel_model, tgt, None), kernel_model, tgt)
    rs, recipe = schedule_model(kernel_model, tgt, schedule)
    return build_schedule(kernel_model, rs, tgt, recipe, bounds_check,
                          state_shapes=[s.shape for s in model.program.states])


def cross_compile(model, target, path, schedule=None) -> str:
    """Compile `model` for another machine and write the code as an object file at `path`.

    The object holds the kernel (`cortex_main`, or the per-level functions);
    link it into a shared library with that machine's toolchain and run it
    with the weights from `compiled.export` semantics.  Returns `path`.
    """
    tgt = make_target(target)
    rs, _ = schedule_model(compiled_form(model, tgt), tgt, schedule)
    mod = split_per_level(rs.func, rs.lowered.first_level) if rs.plan.per_level else rs.mod
    build_module(mod, tgt, rs.plan.pass_config()).mod.write_to_file(str(path), "o")
    return str(path)
