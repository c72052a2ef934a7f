"""RecSchedule's state: the program, the s_tir.Schedule over it, the trace, the runtime plan.

Primitives come in families (program.py, layout.py, loops.py, kernels.py,
gpu.py), each one a method marked `@primitive`: its arguments are checked
against its annotations, any error raised while it applies is a
ScheduleError naming it, and a call that succeeds is recorded in the trace.

Some primitives rewrite the TIR with a pass (TVM's s_tir cannot express
them); after such a rewrite the underlying `s_tir.Schedule` is rebuilt from
the new module, so block and loop handles taken earlier are stale: get them
again by name.
"""
from __future__ import annotations

import copy
import functools
import inspect
import json
import re
import types
import typing
import warnings
from dataclasses import dataclass, field, replace

import tvm
import tvm_ffi
from tvm import s_tir

from .. import level_tails as _tails
from .. import tir_rewrites
from ..lower import FUNC_NAME, TRANSFORM_FUNC, Lowered
from ..plan import RuntimePlan
from ..signature import KernelSignature
from .state import State, check_overrides, declared


class ScheduleError(ValueError):
    """A schedule primitive was misused (a precondition does not hold)."""


#: what a primitive that does not apply raises from inside: TVM's s_tir.ScheduleError and every
#: TVM/ffi runtime error are RuntimeErrors, a rewrite pass refusing the IR a ValueError, ffi
#: arguments of the wrong kind a TypeError
_TVM_ERRORS = (RuntimeError, ValueError, TypeError)
_PLAIN_TYPES = (str, int, float, bool, type(None))


def _plain_types(hint):
    """The plain types an annotation allows (`int`, `int | None`, ...), None for any other annotation."""
    union = isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union
    members = typing.get_args(hint) if union else (hint,)
    return members if all(m in _PLAIN_TYPES for m in members) else None


def _has_type(value, allowed) -> bool:
    # bool is an int to Python but a flag here; an int is a fine float
    if isinstance(value, bool):
        return bool in allowed
    if isinstance(value, int):
        return int in allowed or float in allowed
    return any(isinstance(value, t) for t in allowed if t not in (bool, int))


def primitive(fn):
    """Mark a RecSchedule method as a schedule primitive.

    The call's arguments are bound to the signature (defaults applied) and
    checked against plain-type annotations; an error raised while the
    primitive applies (TVM's, a pass's, or its own precondition) comes out
    as a ScheduleError naming it; on success the step is recorded in the
    trace with its bound arguments.  A failed primitive leaves the schedule
    as it found it: the IR, the plan and the state fields are restored (so a
    recipe's optional step, or the derived schedule trying one primitive
    and then another, continues from an untouched program), and nothing is
    recorded.  A primitive called by another one is not recorded again.
    Docstring and signature stay the function's.
    """
    name = fn.__name__
    signature = inspect.signature(fn)
    checked = {arg: allowed for arg, hint in typing.get_type_hints(fn).items()
               if arg != "return" and (allowed := _plain_types(hint)) is not None}

    @functools.wraps(fn)
    def apply(self, *args, **kwargs):
        try:
            bound = signature.bind(self, *args, **kwargs)
        except TypeError as err:
            raise ScheduleError(f"{name}: {err}") from None
        bound.apply_defaults()
        values = dict(list(bound.arguments.items())[1:])
        for arg, allowed in checked.items():
            if not _has_type(values[arg], allowed):
                expected = " or ".join("None" if t is type(None) else t.__name__ for t in allowed)
                raise ScheduleError(f"{name}: argument {arg!r} must be {expected}, "
                                    f"got {type(values[arg]).__name__} {values[arg]!r}")
        outermost = self._applying == 0
        saved = self._snapshot() if outermost else None
        self._applying += 1
        try:
            result = fn(*bound.args, **bound.kwargs)
        except ScheduleError as err:
            self._restore(saved)
            if re.match(rf"{name}\b", str(err)):
                raise
            raise ScheduleError(f"{name}: {err}") from err
        except _TVM_ERRORS as err:
            self._restore(saved)
            raise ScheduleError(f"{name}: {err}") from err
        finally:
            self._applying -= 1
        if outermost:
            self._record(name, **values)
        return result
    apply.is_primitive = True
    return apply


def renamed(old: str, new):
    """A deprecated name of the primitive `new`: warns, then applies (and records) `new`.

    `replay` reads the old name in traces, recipes and tuning logs as the new one.
    """
    def alias(self, *args, **kwargs):
        warnings.warn(f"RecSchedule.{old} is deprecated; use {new.__name__}", DeprecationWarning, stacklevel=2)
        return getattr(self, new.__name__)(*args, **kwargs)
    alias.__name__ = alias.__qualname__ = old
    alias.__module__ = new.__module__
    alias.__doc__ = f"Deprecated name of `{new.__name__}` (same arguments; applies and records it)."
    alias.__signature__ = inspect.signature(new)
    alias.renamed_to = new.__name__
    return alias


@dataclass
class Step:
    """One recorded primitive call, replayable from JSON when its args are plain values."""

    primitive: str
    args: dict = field(default_factory=dict)

    def as_json(self) -> dict:
        return {"primitive": self.primitive, "args": self.args}

    def as_python(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.args.items())
        return f"rs.{self.primitive}({args})"


#: a block iterator's kind (tvm IterVar.iter_type): data-parallel or a reduction
SPATIAL, REDUCE = 0, 2


class RecScheduleCore:
    """State shared by all primitive families, and what a family may rely on.

    A family (tiles.py, gpu.py, ...) uses this class's helpers (`_block`, `_rewrite`, `plan`,
    ...), declares the fields it keeps besides the IR as `state.State` where it defines its
    primitives, lists in `OVERRIDES` a primitive it replaces in another family, and may call
    `finalize()`, which only the final class (`schedule.RecSchedule`) defines."""

    #: the program as lowered (specialize_leaves and dynamic_batch lower it again)
    lowered = State()
    #: what the runtime must do differently (plan.RuntimePlan)
    plan = State(RuntimePlan())
    #: the primitives applied, with their arguments (the record; see `replay`)
    trace = State([])
    #: primitives applied after which the program can no longer be re-lowered
    scheduled = State([])
    #: (block, loop index) whose reduction init is split off at finalize
    _pending_decompose = State([])
    #: instance fields that are not state: the s_tir schedule (the IR, copied whole by a snapshot)
    #: and the depth of primitives running now (one may call another, which is then not recorded)
    _NOT_STATE = ("sch", "_applying")

    def __init__(self, lowered: Lowered):
        for name, field_ in self._STATE.items():
            setattr(self, name, field_.fresh())
        self.lowered = lowered
        self._applying = 0
        self._reset(lowered.mod)
        self._check_declared("RecSchedule()")

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        cls._STATE = declared(cls)
        check_overrides(cls)

    def _check_declared(self, by: str):
        # a field not in _STATE would silently survive a failed primitive's rollback
        undeclared = sorted(k for k in vars(self) if k not in self._STATE and k not in self._NOT_STATE)
        if undeclared:
            raise AssertionError(f"{by} set {undeclared}, which no family declares as state.State "
                                 "(a failed primitive would not restore it)")

    def finalize(self):
        """What the build needs done last; families may call it (gpu.py's `single_kernel` does,
        before it rewrites the kernel).  Defined by `schedule.RecSchedule`, the final class."""
        raise NotImplementedError

    # -- state -------------------------------------------------------------------------------
    def _reset(self, mod: tvm.IRModule):
        self.sch = s_tir.Schedule(mod)
        self.sch.work_on(FUNC_NAME)

    def _snapshot(self):
        return self.sch.copy(), {f: copy.copy(getattr(self, f)) for f in self._STATE}

    def _restore(self, saved):
        if saved is None:              # inside another primitive: the outermost one restores
            return
        sch, fields = saved
        self.sch = sch
        self.sch.work_on(FUNC_NAME)
        for name, value in fields.items():
            setattr(self, name, value)

    def _functions(self) -> dict:
        """name -> PrimFunc: the kernel, then the parameter transforms when there are any."""
        mod = self.sch.mod
        present = {g.name_hint for g in mod.functions}
        return {name: mod[name] for name in (FUNC_NAME, TRANSFORM_FUNC) if name in present}

    def _replace(self, **functions):
        """Swap in new versions of some functions (a TIR pass's results) and restart s_tir on them."""
        self._reset(tvm.IRModule({**self._functions(), **functions}))

    def _rewrite(self, rewrite_fn, functions=(FUNC_NAME,)):
        """Replace each named function f by `rewrite_fn(f)` (a TIR pass) and restart s_tir."""
        current = self._functions()
        self._replace(**{name: rewrite_fn(current[name]) for name in functions if name in current})

    def _record(self, primitive, **args):
        self._check_declared(primitive)
        self.trace.append(Step(primitive, args))
        if primitive not in ("specialize_leaves", "dynamic_batch"):
            self.scheduled.append(primitive)

    func_name = FUNC_NAME

    @property
    def mod(self) -> tvm.IRModule:
        return self.sch.mod

    @property
    def func(self):
        return self.sch.mod[FUNC_NAME]

    @property
    def transform_func(self):
        """The parameter transforms (`hoist`'s tables, `pack`'s layouts), or None."""
        return self._functions().get(TRANSFORM_FUNC)

    @property
    def signature(self) -> KernelSignature:
        """The calling convention of the module as scheduled so far: the kernel's weight parameters
        (packed, tables) and the transform's inputs and outputs (see `signature.KernelSignature`)."""
        base = self.lowered.signature
        structure = {p.name for p in base.params() if p.role not in ("weight",)}
        weights = tuple(b for b in tir_rewrites.buffer_params(self.func) if b[0] not in structure)
        transform = ()
        if self.transform_func is not None:
            written = tir_rewrites.written_params(self.transform_func)
            transform = tuple((*b, b[0] in written) for b in tir_rewrites.buffer_params(self.transform_func))
        return replace(base, weights=weights, transform=transform)

    def script(self) -> str:
        """The TIR as TVMScript: the kernel, then the parameter transforms when there are any."""
        return "\n".join(f.script() for f in self._functions().values())

    def show(self) -> str:
        """`script()`, then the trace that produced it (the record)."""
        steps = self.trace_python() or "(no primitive applied)"
        return self.script() + "\n# ---- trace\n" + "\n".join(f"# {line}" for line in steps.splitlines())

    def block_names(self, scope: str | None = None) -> list:
        """Names of compute blocks, all or those inside a scope ("leaves" or "level")."""
        if scope is None:
            names = []
            for s in ("tables", "leaves", "level"):
                if self.has_block(s):
                    names += self.block_names(s)
            return names
        out, stack = [], list(self.sch.get_child_blocks(self._block(scope)))
        while stack:
            b = stack.pop(0)
            name = self.sch.get(b).name_hint
            if _tails.is_part(scope, name):         # the whole tiles' or a tail's stages (level_tails)
                stack = list(self.sch.get_child_blocks(b)) + stack
            else:
                out.append(name)
        return out

    def _function_of(self, name: str):
        """The name of the function holding block `name`, or None.

        Read off the IR rather than asked of s_tir: a failed `get_sblock` renders its error
        message (3 ms), and deriving a schedule asks about ~200 names, most of them absent."""
        for func_name, func in self._functions().items():
            found = []
            tvm_ffi.structural_walk(func.body, (s_tir.stmt.SBlock,
                                                lambda b: found.append(b) if b.name_hint == name else None))
            if found:
                return func_name
        return None

    def has_block(self, name: str) -> bool:
        return self._function_of(name) is not None

    def _block(self, name: str):
        """A block of the kernel or of the parameter transforms (their names never collide)."""
        if not isinstance(name, str):
            raise ScheduleError(f"blocks are named by strings, got {type(name).__name__}")
        func_name = self._function_of(name)
        if func_name is None:
            raise ScheduleError(f"no block named {name!r}; blocks are {self.block_names()}")
        return self.sch.get_sblock(name, func_name)

    def _block_loops(self, block: str, untransformed: bool = True):
        """(block handle, its loops inside the stage scope, iter types in loop order).

        With `untransformed`, the block must still have one loop per block
        iterator (no split, fuse or reorder yet), so loops and kinds line up.
        """
        b = self._block(block)
        iters = self.sch.get(b).iter_vars
        loops = self.sch.get_loops(b)
        if untransformed and len(loops) != len(iters):
            raise ScheduleError(f"{block!r} is already transformed (its loops no longer match its iterators)")
        return b, loops, [iv.iter_type for iv in iters]

    # -- trace ---------------------------------------------------------------------------------
    def trace_json(self) -> str:
        """The primitives applied so far as JSON (a recipe; see `replay`)."""
        for step in self.trace:
            if step.primitive.startswith("s_tir."):
                raise ScheduleError(f"{step.primitive} was called with block/loop handles, which have "
                                    "no JSON form; write recipes with RecSchedule's named primitives")
        return json.dumps([s.as_json() for s in self.trace], indent=1)

    def trace_python(self) -> str:
        return "\n".join(s.as_python() for s in self.trace)

    def replay(self, steps) -> "RecScheduleCore":
        """Apply recorded steps (a list of {"primitive", "args"} dicts or a JSON string)."""
        if isinstance(steps, str):
            try:
                steps = json.loads(steps)
            except ValueError as err:
                raise ScheduleError(f"recipe: not valid JSON ({err})") from None
        if not isinstance(steps, list):
            raise ScheduleError(f"a recipe is a list of steps, got {type(steps).__name__}")
        for i, step in enumerate(steps):
            if not isinstance(step, dict) or "primitive" not in step:
                raise ScheduleError(f"recipe step {i} is not a {{'primitive': ..., 'args': ...}} object")
            name = step["primitive"]
            if name == "unroll_recursion" and "chunks" not in (step.get("args") or {}):
                # written while unroll_recursion was the old name of unroll_levels (every trace of
                # CORTEX's unrolling records its chunks)
                name = "unroll_levels"
            method = getattr(type(self), name, None) if isinstance(name, str) else None
            if hasattr(method, "renamed_to"):          # a trace written before the rename
                name = method.renamed_to
                method = getattr(type(self), name)
            if not getattr(method, "is_primitive", False):
                raise ScheduleError(f"recipe step {i}: unknown primitive {name!r}")
            args = step.get("args", {})
            if not isinstance(args, dict):
                raise ScheduleError(f"recipe step {i}: args must be an object")
            try:
                inspect.signature(method).bind(self, **args)
            except TypeError as err:
                raise ScheduleError(f"recipe step {i} ({name}): {err}") from None
            getattr(self, name)(**args)
        return self

    # -- s_tir passthrough ---------------------------------------------------------------------
    def __getattr__(self, name):
        if name.startswith("_") or name in ("sch",):
            raise AttributeError(name)
        attr = getattr(self.sch, name)
        if not callable(attr):
            return attr

        def recorded(*args, **kwargs):
            try:
                result = attr(*args, **kwargs)
            except s_tir.ScheduleError as err:
                raise ScheduleError(str(err)) from err
            if name not in ("get_sblock", "get_loops", "get", "get_child_blocks", "get_producers",
                            "get_consumers", "get_sref", "work_on", "show"):
                self._record(f"s_tir.{name}", args=repr(args), kwargs=repr(kwargs))
            return result
        recorded.__doc__ = attr.__doc__
        return recorded


#: everything a primitive may change besides the IR (restored when one fails): name -> State, the
#: fields the classes of a schedule declare (each subclass assembles its own: __init_subclass__)
RecScheduleCore._STATE = declared(RecScheduleCore)
