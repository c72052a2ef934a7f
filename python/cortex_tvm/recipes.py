"""Schedule recipes: named, replayable lists of RecSchedule primitives.

Recipes live as JSON in the top-level `schedules/` folder (installed as
`cortex_tvm.schedules`): `{"name", "model", "target", "default", "knobs",
"steps": [{"primitive", "args", "optional"}]}`.  A step marked optional is
skipped when its precondition fails (e.g. `hoist` over its memory budget,
or a block that `hoist` removed).  An argument written "$name" is a knob:
`knobs` lists its candidate values, the first being the default; when a
candidate does not fit the model (a tile that does not divide the hidden
size), the next one is tried.  A step with `"when": "$knob"` runs only
when that knob is true.  The tuner searches the same knobs.  Two
recipes are built in: "none" (the lowered program as is) and "auto" (a
generic schedule for any model).
"""
from __future__ import annotations

import json
import warnings
from dataclasses import dataclass, field, replace
from importlib import resources

from . import amx_bf16 as _amx
from . import dot_bf16 as _dot
from .policy import derive as _derive
from .schedule import RecSchedule, ScheduleError
from .target import cpu_info


@dataclass(frozen=True)
class Recipe:
    name: str
    steps: tuple = ()
    model: str = "*"
    target: str = "*"
    default: bool = False
    apply_fn: object = field(default=None, compare=False)
    #: knob name -> candidate values, the first being the default
    knobs: dict = field(default_factory=dict, compare=False)
    #: knob values chosen for this instance (see `with_knobs`)
    chosen: dict = field(default_factory=dict, compare=False)
    #: the precision `with_precision` made this recipe for
    precision: str = "fp32"
    #: for a recipe `with_precision` made for "bf16": the fp32 recipe it extends (`for_target`
    #: rebuilds it with or without dot_bf16 once the target is known)
    fp32_base: object = field(default=None, compare=False, repr=False)
    #: a bf16 recipe that multiplies with vdpbf16ps (`dot_bf16` before `store_bf16`)
    bf16_dot: bool = False
    #: a bf16 recipe that multiplies on AMX tiles (`amx_bf16` after `dot_bf16`)
    bf16_amx: bool = False

    def with_knobs(self, **values) -> "Recipe":
        unknown = set(values) - set(self.knobs)
        if unknown:
            raise ValueError(f"recipe {self.name!r} has no knobs {sorted(unknown)}; knobs: {sorted(self.knobs)}")
        for name, value in values.items():
            kinds = {_kind(c) for c in self.knobs[name]}
            if kinds and _kind(value) not in kinds:
                raise ValueError(f"recipe {self.name!r}: knob {name!r} takes values like {self.knobs[name]}, "
                                 f"got {value!r}")
        return replace(self, chosen={**self.chosen, **values})

    def knob_values(self) -> dict:
        return {k: self.chosen.get(k, v[0]) for k, v in self.knobs.items()}

    def steps_with_knobs(self) -> list:
        values = self.knob_values()

        def fill(v):
            if isinstance(v, str) and v.startswith("$"):
                if v[1:] not in values:
                    raise ValueError(f"recipe {self.name!r}: unknown knob {v!r}")
                return values[v[1:]]
            return v
        return [{**step, "args": {k: fill(v) for k, v in step.get("args", {}).items()},
                 "when": fill(step.get("when", True))} for step in self.steps]

    def apply(self, rs: RecSchedule, skip: tuple = ()) -> RecSchedule:
        """Apply the steps (or the function); primitives named in `skip` are left out."""
        if self.apply_fn is not None:
            if skip:
                raise ScheduleError(f"recipe {self.name!r} is a function; cannot leave out {skip}")
            return (self.apply_fn(rs, **self.knob_values()) if self.knobs else self.apply_fn(rs)) or rs
        seen = rs.possible_names()        # every name this program has or can have
        for step in self.steps_with_knobs():
            if step.get("primitive") in skip or not step.get("when", True):
                continue
            try:
                rs.replay([step])
            except ScheduleError as err:
                if not step.get("optional"):
                    raise
                named = step.get("args", {}).get("block") or step.get("args", {}).get("tensor")
                if isinstance(named, str) and named not in seen:
                    # an optional step may not apply (a block an earlier step removed, a tile that
                    # does not divide); a name the program never had is a renamed compute
                    warnings.warn(f"recipe {self.name!r}: optional step {step['primitive']}({named!r}) skipped: "
                                  f"the program has no block or scratchpad {named!r} ({err})", stacklevel=3)
            seen |= rs.possible_names()
        return rs

    def fitted(self, make_schedule) -> "Recipe":
        """This recipe with the first knob values, in candidate order, that apply to the model.

        `make_schedule()` returns a fresh RecSchedule.  Knobs are fixed one at a
        time (greedy), so the cost is a few schedule applications, no builds.
        """
        recipe, errors = self, []
        for name, candidates in [(None, [None])] + list(self.knobs.items()):
            for value in candidates:
                trial = recipe if name is None else recipe.with_knobs(**{name: value})
                try:
                    trial.apply(make_schedule())
                    return trial
                except ScheduleError as err:
                    errors.append(str(err))
            if name is not None:
                recipe = recipe.with_knobs(**{name: candidates[0]})
        raise ScheduleError(f"recipe {self.name!r} does not fit this model: " + "; ".join(errors[:3]))


#: compile(precision=...): "fp32" (the default) or "bf16" (packed weights stored as bfloat16)
PRECISIONS = ("fp32", "bf16")
#: how far a build's roots may be from the float64 reference, by precision: float32 roots
#: differ by ~1e-7-1e-6, bf16 weights (8 significant bits) move them by up to a few 1e-3
ROOT_TOLERANCE = {"fp32": 1e-3, "bf16": 1e-2}


def check_precision(precision, target) -> str:
    """`precision` if it is one this target builds; ValueError naming the choices otherwise."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
    if precision != "fp32" and target.kind.name != "llvm":
        raise ValueError(f"precision={precision!r} is built for CPU targets (llvm) only, not "
                         f"{target.kind.name!r}")
    return precision


def with_precision(recipe: Recipe, precision: str) -> Recipe:
    """`recipe` followed by what `precision` needs: nothing for "fp32"; for "bf16", `store_bf16()`
    (a recipe that stores bf16 already is left as it is).

    Whether "bf16" also multiplies in bfloat16 (`dot_bf16()`, vdpbf16ps, before `store_bf16()`)
    depends on the target's CPU: `for_target` decides, and the build applies it
    (`build.schedule_model`)."""
    made_for = "bf16" if any(step.get("primitive") == "store_bf16" for step in recipe.steps) else recipe.precision
    if precision == made_for:
        return recipe
    if made_for != "fp32":
        raise ValueError(f"recipe {recipe.name!r} is made for precision {made_for!r}, not {precision!r}")
    return _bf16(recipe, False)


def for_target(recipe: Recipe, target) -> Recipe:
    """A bf16 recipe `with_precision` made, multiplying as the target's CPU allows: on AMX tiles
    where it has AMX-BF16 (`amx_bf16.has_feature`: `dot_bf16` then `amx_bf16`, one node per GEMM
    tile, the form the tiles take, and two column vectors, `AMX_KNOBS`), with `dot_bf16` where it has
    AVX512_BF16 (`dot_bf16.has_feature`), else storage-only.  The multiplying steps are optional:
    a model whose GEMMs do not fit keeps the next kind down.  Knob choices are kept (a node tile
    chosen above 1 leaves AMX out); target None: storage-only.  Any other recipe is unchanged (a
    recipe written with store_bf16 or dot_bf16 steps is applied as written).

    On a Sapphire Rapids class Xeon (2 cores, TreeLSTM H=256, in-process A/B against fp32) AMX
    ran 1.3x / 2.1x / 2.5x faster than fp32 at batch 1 / 10 / 64 and `vdpbf16ps` 0.9x / 0.6x /
    0.6x: that CPU issues `vdpbf16ps` at the rate of its two fp32 FMA units, and the pairs' rounding
    and widening cost more than the halved bytes save (docs/benchmarks.md)."""
    if recipe.fp32_base is None:
        return recipe
    kind = bf16_products(target)
    dot, amx = kind != "storage", kind == "amx"
    if (dot, amx) == (recipe.bf16_dot, recipe.bf16_amx):
        return recipe
    return _bf16(replace(recipe.fp32_base, chosen=recipe.chosen), dot, amx)


def bf16_products(target) -> str:
    """How precision="bf16" multiplies on `target` (None: a target not known): "amx" (AMX-BF16
    tiles, which rewrite dot_bf16's GEMMs and so need AVX512_BF16 too), "vdpbf16ps"
    (AVX512_BF16) or "storage" (float32 products of widened weights)."""
    if target is None or not _dot.has_feature(target):
        return "storage"
    return "amx" if _amx.has_feature(target) else "vdpbf16ps"


#: the derived schedule's knobs for AMX tiles: a GEMM tile of one node (amx_bf16 takes 16 at a
#: time from the node loop) and two column vectors (1.1x faster than one at H=256 batch 10)
AMX_KNOBS = {"node_tile": 1, "max_column_vectors": 2}


def finish_bf16(rs: RecSchedule, dot: bool, amx: bool = False) -> RecSchedule:
    """What precision "bf16" adds after a schedule: `dot_bf16()` when `dot` and then `amx_bf16()`
    when `amx` (each skipped where no GEMM fits it), then `store_bf16()` for the packed weights
    left in float32."""
    # on AMX a GEMM the tiles cannot take is better storage-only than on vdpbf16ps, rounding at
    # each use (`dot_bf16(round_once_only=True)`)
    for wanted, step in ((dot, lambda: rs.dot_bf16(round_once_only=amx)), (dot and amx, rs.amx_bf16)):
        if wanted:
            try:
                step()
            except ScheduleError:
                break        # no tiled GEMM of the form the instruction needs: the kind below
    return rs.store_bf16()


def _bf16(base: Recipe, dot: bool, amx: bool = False) -> Recipe:
    # the fp32 defaults: with levels that end in tails, fp32's larger tiles are faster in bf16
    # too (TreeLSTM H=256, Zen 5: 5 nodes 1.08-1.13x with vdpbf16ps, 1.02-1.05x storage-only;
    # TreeGRU 6 nodes 1.08-1.12x at batch 10 and 64, 3% slower at 1; docs/benchmarks.md)
    fp32 = base
    if amx:
        base = base.with_knobs(**{k: v for k, v in AMX_KNOBS.items() if k in base.knobs and k not in base.chosen})
    knobs = base.knobs
    if base.apply_fn is not None:
        inner = base.apply_fn

        def then_bf16(rs, **knobs):
            rs = (inner(rs, **knobs) if knobs else inner(rs)) or rs
            return finish_bf16(rs, dot, amx)
        return replace(base, apply_fn=then_bf16, knobs=knobs, precision="bf16", fp32_base=fp32, bf16_dot=dot,
                       bf16_amx=amx)
    dot_step = ({"primitive": "dot_bf16", "args": {"round_once_only": True} if amx else {}, "optional": True},) \
        if dot else ()
    amx_step = ({"primitive": "amx_bf16", "args": {}, "optional": True},) if dot and amx else ()
    return replace(base, steps=tuple(base.steps) + dot_step + amx_step + ({"primitive": "store_bf16", "args": {}},),
                   knobs=knobs, precision="bf16", fp32_base=fp32, bf16_dot=dot, bf16_amx=amx)


def _kind(value) -> str:
    """A knob value's kind: bool, number or the type name (so 7 fits an int knob, "x" does not)."""
    if isinstance(value, bool):
        return "bool"
    return "number" if isinstance(value, (int, float)) else type(value).__name__


def auto(rs: RecSchedule) -> RecSchedule:
    """A generic schedule for any model: specialize, fast math, dense scratchpads, vectorize."""
    rs.specialize_leaves()
    rs.fast_math()
    for name in rs.scratchpads():
        rs.dense_index(name)
    for block in rs.block_names():
        for primitive in (rs.tile_gemm, rs.vectorize_block):
            try:
                primitive(block)
                break
            except ScheduleError:
                continue
    return rs


def derived(model, target, facts=None) -> Recipe:
    """The schedule derived from `model`'s program and the CPU `target` (see policy/derive.py),
    as a recipe whose knobs (node tile, column vectors, lanes, unroll, hoisting, ...) the tuner
    searches; the first candidate of each knob is the analytic default for this CPU.  facts: the
    compile's `padding.ProgramFacts` for `model` (its CPU and GEMMs, handed on to `derive.derive`
    for the schedules of `model` it applies to; else found here, and by each schedule)."""
    info = cpu_info(target) if facts is None else facts.info
    program_gemms = None if facts is None else facts.gemms
    found = _derive.gemms(RecSchedule(model.lower(specialize_leaves=True))) if facts is None else facts.gemms
    widest = max((g.middle for g in found), default=1)
    return Recipe("derived", model=type(model).__name__, target="llvm", default=True,
                  apply_fn=lambda rs, **knobs: _derive.derive(rs, info, program_gemms=program_gemms, **knobs),
                  knobs=_derive.knob_space(widest, info, unrollable=model.program.spec.kind != "dag"))


def _builtin():
    return {"none": Recipe("none", apply_fn=lambda rs: rs), "auto": Recipe("auto", apply_fn=auto)}


def load_file(path) -> Recipe:
    """A recipe from a JSON file; ValueError naming the file if it is malformed."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        if not isinstance(data, dict):
            raise ValueError(f"expected a JSON object, got {type(data).__name__}")
        missing = [k for k in ("name", "steps") if k not in data]
        if missing:
            raise ValueError(f"missing keys {missing}")
        if not isinstance(data["steps"], list) or not all(isinstance(x, dict) for x in data["steps"]):
            raise ValueError('"steps" must be a list of {"primitive": ..., "args": ...} objects')
        if not isinstance(data.get("knobs", {}), dict):
            raise ValueError('"knobs" must be an object of knob name -> candidate list')
        return Recipe(data["name"], tuple(data["steps"]), data.get("model", "*"), data.get("target", "*"),
                      bool(data.get("default", False)), knobs=dict(data.get("knobs", {})))
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise ValueError(f"recipe {path}: {err}") from err


def shipped() -> dict:
    """Recipes shipped in cortex_tvm.schedules, by name."""
    out = _builtin()
    for entry in resources.files("cortex_tvm.schedules").iterdir():
        if entry.name.endswith(".json"):
            with resources.as_file(entry) as path:
                recipe = load_file(path)
            out[recipe.name] = recipe
    return out


def names() -> list:
    return sorted(shipped())


def resolve(model, target, schedule, facts=None) -> Recipe:
    """The recipe for `schedule`: None (the model's default for the target), a name, a Recipe,
    a JSON file path, or a callable taking a RecSchedule.  facts: as `derived`'s."""
    if isinstance(schedule, Recipe):
        return schedule
    kind = target.kind.name
    recipes = shipped()
    if schedule is None or schedule == "derived":
        for r in recipes.values():
            if r.default and r.model == type(model).__name__ and r.target == kind and schedule is None:
                return r
        return derived(model, target, facts) if kind == "llvm" else recipes["auto"]
    if callable(schedule):
        return Recipe(getattr(schedule, "__name__", "custom"), apply_fn=schedule)
    if isinstance(schedule, str):
        if schedule in recipes:
            return recipes[schedule]
        if schedule.endswith(".json"):
            return load_file(schedule)
        raise ValueError(f"unknown schedule {schedule!r}; known: {sorted(recipes)}")
    raise TypeError(f"schedule must be a recipe name, a .json path or a callable, got {type(schedule).__name__}")
