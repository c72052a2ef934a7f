"""Targets and compilation: a scheduled PrimFunc -> a runtime module, cached per process."""
from __future__ import annotations

import threading
import warnings

import tvm
import tvm_ffi
from tvm.target import Target, codegen

from . import config

_cache: dict = {}
_cache_lock = threading.Lock()
_compiles = 0


def compile_count() -> int:
    """How many times `tvm.compile` ran in this process (the cache hides repeats)."""
    return _compiles


def make_target(target) -> Target:
    """A TVM Target from "llvm", "cuda", a dict or a Target.

    "llvm" means this machine's CPU with all its cores (TVM's "native" falls
    back to a generic CPU in this version, so the CPU is detected here).
    """
    if isinstance(target, Target):
        return target
    if isinstance(target, dict):
        return Target(target)
    if target == "llvm":
        return Target({"kind": "llvm", "mcpu": codegen.llvm_get_system_cpu(),
                       "num-cores": config.load().num_threads})
    if target == "cuda":
        return Target({"kind": "cuda", "arch": "sm_90"}, host={"kind": "llvm"})
    if isinstance(target, str):
        raise ValueError(f"unknown target {target!r}: use 'llvm', 'cuda', a dict or a tvm.target.Target")
    raise TypeError(f"target must be a string, dict or tvm.target.Target, got {type(target).__name__}")


def build_module(mod: tvm.IRModule, target: Target, pass_config: dict | None = None):
    """tvm.compile with an in-process cache keyed by the IR's structural hash, target and config."""
    global _compiles
    pass_config = pass_config or {}
    key = (tvm_ffi.structural_hash(mod), str(target), repr(sorted(pass_config.items())))
    with _cache_lock:
        if key in _cache:
            return _cache[key]
        with tvm.transform.PassContext(opt_level=3, config=pass_config):
            executable = tvm.compile(mod, target=target)
        _compiles += 1
        _cache[key] = executable
        return executable


def schedule_model(model, target, schedule=None):
    """model -> lowered -> RecSchedule with the recipe applied and finalized."""
    from . import recipes
    from .schedule import RecSchedule, ScheduleError

    def fresh():
        return RecSchedule(model.lower(specialize_leaves=False))

    recipe = recipes.resolve(model, target, schedule)
    if recipe.knobs:
        try:
            recipe = recipe.fitted(fresh)
        except ScheduleError as err:
            if schedule is not None:
                raise
            # the model's default recipe does not fit these sizes: the generic one always does
            warnings.warn(f"{err}; using the generic 'auto' schedule", stacklevel=3)
            recipe = recipes.resolve(model, target, "auto")
    rs = fresh()
    recipe.apply(rs)
    return rs.finalize(), recipe


def compile_model(model, target="llvm", schedule=None, tuning_log=None):
    """model -> lowered -> scheduled -> built -> CompiledModel."""
    from .runtime import CompiledModel, weight_arrays
    from .schedule import split_per_level

    tgt = make_target(target)
    if tuning_log is not None:
        from .tune.apply import resolve_recipe
        schedule = resolve_recipe(model, tuning_log, tgt, schedule)
    rs, recipe = schedule_model(model, tgt, schedule)
    tables = hoisted_tables(model, rs, recipe, tgt) if rs.plan.hoisted else {}
    mod = split_per_level(rs.func, rs.lowered.first_level) if rs.plan.per_level else rs.mod
    executable = build_module(mod, tgt, rs.plan.pass_config())
    return CompiledModel(model, rs.lowered, executable, tgt, rs.plan, weight_arrays(model, rs, tables),
                         recipe.name)


def hoisted_tables(model, rs, recipe, target) -> dict:
    """Leaf states for every word, computed by the same recipe without `hoist` (CORTEX's hoisting)."""
    from . import data
    from .runtime import CompiledModel, weight_arrays
    from .schedule import RecSchedule, ScheduleError, split_per_level

    table_rs = RecSchedule(model.lower(specialize_leaves=False))
    if recipe.apply_fn is None:
        recipe.apply(table_rs, skip=("hoist",))
    else:   # a function recipe: replay what it did, minus hoist and what only existed after it
        for step in rs.trace:
            if step.primitive != "hoist":
                try:
                    table_rs.replay([step.as_json()])
                except ScheduleError:
                    pass
    table_rs.finalize()
    mod = split_per_level(table_rs.func, table_rs.lowered.first_level) if table_rs.plan.per_level else table_rs.mod
    table_model = CompiledModel(model, table_rs.lowered, build_module(mod, target, table_rs.plan.pass_config()), target, table_rs.plan,
                                weight_arrays(model, table_rs, {}), "hoist-tables")
    vocabulary = [data.Node(word=w) for w in range(model.vocab_bound)]
    lin = table_model.linearize(vocabulary)
    _, states = table_model.run(lin)
    rows = lin.node_slots
    return {table: states[i][rows].copy() for i, (_, table) in enumerate(rs.plan.hoisted)}
