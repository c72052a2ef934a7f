"""The compile entry point: model -> padded model -> schedule -> build -> CompiledModel.

Each stage hands the next a record of what it needs, and no model is changed: the program facts
(`padding.ProgramFacts`: the target, the padded model, its `Padding`, the GEMMs), then the
scheduled program (`Scheduled`: the schedule, the recipe it applied, the facts), then the
CompiledModel.

The top of the compiling stages and the only one that consults tuning: a tuning log's record
for this model and CPU, else the recipe named by `schedule` (default: the derived schedule at
its analytic point; "ranked": the shipped cost model's pick among a few of its configurations,
read off their scheduled programs, no measurement).
"""
from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np

from . import dot_bf16, recipes
from .adjoint import Adjoint
from .build import build_schedule, schedule_model
from .compile_cache import compile_module
# padded_model (and compiled_form, its deprecated old name): imported from here
from .policy.padding import ProgramFacts, compiled_form, padded_model, program_facts  # noqa: F401
from .recipes import Recipe, check_precision, with_precision
from .runtime import CompiledModel, cannot_run_here
from .schedule import RecSchedule
from .target import cpu_info, cuda_sm_count, make_target  # noqa: F401  (make_target: imported from here)
from .tune.apply import resolve_recipe
from .tune.pretrained import choose


#: `schedule=RANKED`: the derived schedule with the knobs the shipped cost model ranks first.
#: Not the default: held out, its pick is level with the analytic rule (docs/tuning.md), and
#: ranking applies every candidate's schedule.
RANKED = "ranked"


def compile_model(model, target="llvm", schedule=None, tuning_log=None, bounds_check=False,
                  max_unroll_depth=None, precision="fp32", training=False):
    """model -> lowered -> scheduled -> built -> CompiledModel.

    schedule: None (the model's default recipe: on a CPU the derived schedule at its analytic
    point), a recipe name, "ranked" (the shipped cost model's pick, see RANKED), a Recipe, a
    .json path or a callable taking a RecSchedule.

    max_unroll_depth: CORTEX's recursive unrolling (`unroll_recursion`): each node computed in
    one step with its descendants this many levels down, on one thread (1: none); None lets
    the tuning log choose (the default schedule does not unroll).  Trees and sequences only.

    precision: "fp32", or "bf16": the packed GEMM weights are stored as bfloat16 and widened
    to float32 in registers (`RecSchedule.store_bf16`); states and accumulation stay float32.
    With training=True, "bf16" also runs the training pass's products on bfloat16 inputs
    (AVX512_BF16 CPUs: `training_pass`).

    `run(lin)` validates its arrays by default (`CompiledModel.check`: the compiled check, then
    `linearize.check_bounds` to name a fault); bounds_check=True also validates the arrays
    `__call__` makes with `linearize` (valid by construction).  (TVM's own
    `tirx.instrument_bound_checkers` is not used: in TVM 0.27 it adds nothing to these kernels.)

    training=True: the result also has the backward pass generated from the RA program
    (`adjoint.Adjoint`): `compiled.vjp(trees)`, and `as_torch()` with parameters and gradients."""
    if not isinstance(bounds_check, bool):
        raise TypeError(f"bounds_check must be a bool, got {type(bounds_check).__name__}")
    # the target, the padded model and its GEMMs, found once for every stage below
    facts = program_facts(model, target)
    tgt, padded = facts.target, facts.padded_model
    check_precision(precision, tgt)
    adjoint = training_pass(model, tgt, precision, training)
    ranked = isinstance(schedule, str) and schedule == RANKED
    if tuning_log is None:
        recipe = recipes.resolve(padded, tgt, None if ranked else schedule, facts)
    else:
        # a log's record for this model wins; without one, "ranked" still ranks.  The log's knob
        # space is the recipe this compile would resolve, made on these facts: resolved once
        recipe, from_log = resolve_recipe(model, tuning_log, facts, None if ranked else schedule, precision)
        ranked = ranked and not from_log
    if ranked and tgt.kind.name != "llvm":
        raise ValueError(f"schedule={RANKED!r} ranks the derived CPU schedule; the target is {tgt.kind.name!r}")
    if ranked:
        # the shipped cost model ranks a few configurations of the derived schedule, unmeasured:
        # each one's schedule is applied to read its program (0.7-6 s at the zoo's sizes)
        recipe = choose(recipe, padded, tgt, facts)
    recipe = unrolled(recipe, tgt, max_unroll_depth)
    if adjoint is not None:
        recipe = without_leaf_tables(recipe)
    recipe = with_device_grid(with_precision(recipe, precision), tgt)
    compiled = scheduled(facts, recipe).build(bounds_check, state_shapes=[s.shape for s in model.program.states])
    if adjoint is not None:
        compiled.adjoint = adjoint
        compiled.training_weights = {name: np.array(w, np.float32) for name, w in model.weights.items()}
    return compiled


@dataclass(frozen=True)
class Scheduled:
    """One compile's scheduled stage (`scheduled`), what its build needs."""

    #: the padded model's program with the recipe applied, finalized
    rs: RecSchedule
    #: the recipe applied: the one given, fitted to the sizes (or the generic fallback,
    #: `build.schedule_model`); it names the CompiledModel
    recipe: Recipe
    #: the compile's facts: the target, the padded model whose weights are built in, its padding
    facts: ProgramFacts

    def build(self, bounds_check: bool = False, state_shapes=None) -> CompiledModel:
        """The schedule built with the padded model's weights (`build.build_schedule`); the
        result pads weights given in the user's sizes as the facts' padding says."""
        facts = self.facts
        return build_schedule(facts.padded_model, self.rs, facts.target, self.recipe, bounds_check,
                              state_shapes, padding=facts.padding)


def scheduled(facts: ProgramFacts, recipe: Recipe, bf16_dot: bool = True) -> Scheduled:
    """The padded model of `facts` scheduled for its target with `recipe` (a resolved Recipe):
    the scheduled stage (`build.schedule_model`; bf16_dot as there)."""
    rs, applied = schedule_model(facts.padded_model, facts.target, recipe, bf16_dot)
    return Scheduled(rs, applied, facts)


#: the derived schedule's knob for `RecSchedule.hoist` (leaf states as per-word tables)
HOIST_KNOB = "hoist"


def without_leaf_tables(recipe):
    """The recipe with its leaf tables (`hoist`) turned off, where it has the knob.

    A table holds the leaf state of every word of the vocabulary, computed from the weights by
    the parameter transforms: cheap once for inference, but training changes the weights at
    every step, and recomputing a table for every word (TreeLSTM: a (V, E) x (E, 3H) product)
    costs more than the leaves of a batch."""
    return recipe.with_knobs(**{HOIST_KNOB: False}) if HOIST_KNOB in recipe.knobs else recipe


def training_pass(model, target, precision, training):
    """The backward pass of `model` for compile(training=True) (`adjoint.Adjoint`), else None.

    It differentiates the user's program at the user's sizes (the kernel's padding is sliced off
    the saved states), in float32; its compiled level pass runs where the kernel does (a CPU,
    or a CUDA GPU: `adjoint_gpu`), the weights' remaining sums on the host.  precision="bf16"
    (a CPU with AVX512_BF16): the level pass's products of weights and node values take bfloat16
    inputs, summed in float32 (`adjoint_bf16`); weights, states and gradients stay float32."""
    if not isinstance(training, bool):
        raise TypeError(f"training must be a bool, got {type(training).__name__}")
    if not training:
        return None
    if precision == "bf16" and not dot_bf16.has_feature(target):
        raise ValueError("training=True, precision='bf16' multiplies on AVX512_BF16's vdpbf16ps: the target "
                         f"{str(target)!r} lacks avx512bf16 (a CPU target with it, or precision='fp32')")
    if target.kind.name not in ("llvm", "cuda"):
        raise ValueError(f"training=True: the backward pass is built for target 'llvm' or 'cuda', "
                         f"not {target.kind.name!r}")
    foreign = None if target.kind.name == "cuda" else cannot_run_here(target)
    if foreign is not None:           # the backward is built to run in this process, on this CPU
        raise ValueError(f"training=True needs a target this machine runs: {foreign}")
    adjoint = Adjoint(model.program, model.linearize, target, bf16=precision == "bf16")
    if precision == "bf16" and adjoint.level_pass is None:
        raise ValueError(f"training=True, precision='bf16' needs the compiled level pass, which this program "
                         f"does not have ({adjoint.level_pass_note}): use precision='fp32'")
    return adjoint


def cross_compile(model, target, path, schedule=None, precision="fp32") -> str:
    """Compile `model` for another machine and write the code as an object file at `path`.

    The object holds the kernel (`cortex_main`, or the per-level functions) and the
    parameter transforms (`cortex_transform_params`, when the schedule packs or hoists);
    link it into a shared library with that machine's toolchain, run the transforms once
    on the model's weights, then the kernel.  Beside it, `<path>.json` records what the
    code expects that the object cannot say: the target, and how each weight is padded to
    the kernel's sizes (`weight_padding`: [axis, block, size, padded size] per padded axis;
    pad the user's weights with zeros the same way before the transforms).  Returns `path`.
    """
    facts = program_facts(model, target)
    tgt, padded = facts.target, facts.padded_model
    check_precision(precision, tgt)
    rs = scheduled(facts, with_precision(recipes.resolve(padded, tgt, schedule, facts), precision)).rs
    mod = rs.finalize().module()
    compile_module(mod, tgt, rs.plan.pass_config()).mod.write_to_file(str(path), "o")   # (not a cached library)
    padding = {} if facts.padding is None else facts.padding.weight_padding
    with open(f"{path}.json", "w", encoding="utf-8") as f:
        json.dump({"model": type(model).__name__, "target": str(tgt), "precision": precision,
                   "bf16_weights": list(rs.plan.bf16_weights),
                   "weight_padding": {name: [list(p) for p in pads] for name, pads in padding.items()},
                   "functions": sorted(g.name_hint for g in mod.functions)}, f, indent=1)
    return str(path)


#: the CUDA recipes' knob for the persistent kernel's grid (`single_kernel(blocks)`)
GRID_KNOB = "grid"


def with_device_grid(recipe, target):
    """A CUDA recipe's grid knob set to the visible GPU's SM count (one persistent block per SM),
    unless the recipe's knobs were chosen already (a tuning log's record, the user's); without a
    visible GPU the recipe's default grid stays (132: an H100/H200)."""
    if target.kind.name != "cuda" or GRID_KNOB not in recipe.knobs or GRID_KNOB in recipe.chosen:
        return recipe
    sm_count = cuda_sm_count()
    return recipe if sm_count is None else recipe.with_knobs(**{GRID_KNOB: sm_count})


#: the derived schedule's knob for CORTEX's recursive unrolling (`RecSchedule.unroll_recursion`)
UNROLL_KNOB = "recursion_depth"
#: knobs of a recipe that cannot go with recursive unrolling, and the values that leave them out
_NOT_WITH_UNROLLING = {"parallel_columns": False, "unroll_depth": 1, "per_level": False,
                       "persistent_threads": False}


def with_unroll_depth(model, target, schedule, depth):
    """The schedule `schedule` (None: the default for `model` on `target`) with CORTEX's
    recursive unrolling to `depth` levels (`RecSchedule.unroll_recursion`; 1: none).

    The one place where `max_unroll_depth` meets the schedules: a recipe with a
    `recursion_depth` knob (the derived schedule) gets that knob set; any other recipe
    gets its knobs that conflict with unrolling turned off (parallel columns, level-loop
    unrolling, per-level kernels), is applied, and is followed by `unroll_recursion(depth)`
    with one chunk per core of the target.

    Example: ``model.compile(schedule=with_unroll_depth(model, make_target("llvm"), None, 2))``.
    """
    return schedule if depth is None else unrolled(recipes.resolve(model, target, schedule), target, depth)


def unrolled(recipe, target, depth) -> Recipe:
    """`with_unroll_depth` of a recipe already resolved (depth None: the recipe itself)."""
    if depth is None:
        return recipe
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
        raise ValueError(f"max_unroll_depth must be a positive int or None, got {depth!r}")
    if UNROLL_KNOB in recipe.knobs:
        return recipe.with_knobs(**{UNROLL_KNOB: depth})
    if depth == 1:
        return recipe
    if target.kind.name != "llvm":
        raise ValueError(f"max_unroll_depth={depth}: recursive unrolling is built for the CPU; the target "
                         f"is {target.kind.name!r}")
    off = {k: v for k, v in _NOT_WITH_UNROLLING.items() if k in recipe.knobs}
    recipe = recipe.with_knobs(**off) if off else recipe
    chunks = cpu_info(target).cores

    def then_unroll(rs):
        recipe.apply(rs)
        rs.unroll_recursion(depth, chunks=chunks)
        return rs
    return Recipe(f"{recipe.name}+unroll{depth}", apply_fn=then_unroll)
