"""The knob space of a model and target: a recipe's knobs, invalid combinations pruned.

A point is valid when the recipe with its knob values applies to a fresh
`RecSchedule` of the model (schedule only, no build).  Checking costs
0.05-0.2 s, so the space checks lazily and remembers: enumerating every
point is for small spaces (`valid_points`), sampling is for large ones.
"""
from __future__ import annotations

import itertools
import json
import warnings
from dataclasses import dataclass

import numpy as np

from .. import recipes as _recipes
from ..policy.padding import ProgramFacts, program_facts
from ..target import make_target
from ..schedule import RecSchedule, ScheduleError


#: knobs renamed since logs were written (old name -> new): records carrying an old name are
#: read with the new one, so logs and cost data made before a rename keep matching the space
RENAMED_KNOBS = {"persist": "parallel_columns"}


@dataclass(frozen=True)
class TuningPoint:
    """One configuration: knob name -> value, kept as a sorted tuple so it hashes."""

    knobs: tuple

    @classmethod
    def of(cls, **knobs) -> "TuningPoint":
        return cls(tuple(sorted(knobs.items())))

    def as_dict(self) -> dict:
        return dict(self.knobs)

    def to_json(self) -> dict:
        return self.as_dict()

    @classmethod
    def from_json(cls, data) -> "TuningPoint":
        """From `to_json()`'s dict or its JSON text (old knob names read as their new ones)."""
        if isinstance(data, str):
            data = json.loads(data)
        if not isinstance(data, dict):
            raise ValueError(f"a tuning point is a JSON object of knob values, got {data!r}")
        return cls.of(**{RENAMED_KNOBS.get(name, name): value for name, value in data.items()})

    def __str__(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in self.knobs)


class Space:
    """The configurations of `recipe` (default: the model's recipe for the target).

    knobs: optional overrides {name: candidates} to search fewer values
    (knobs left out keep all their candidates; a knob fixed to one value is
    written as a one-element list).  facts: `padding.program_facts(model, target)`
    when the caller has them (a compile reading a tuning log), so that the padded
    model and its GEMMs are not found a second time; found here otherwise.
    """

    def __init__(self, model, target="llvm", recipe=None, knobs: dict | None = None, precision: str = "fp32",
                 facts: ProgramFacts | None = None):
        self.model, self.target = model, make_target(target)
        #: every point's recipe is followed by what this precision needs (store_bf16 for "bf16")
        self.precision = _recipes.check_precision(precision, self.target)
        facts = program_facts(model, self.target) if facts is None else facts
        #: the model as the kernel computes it (sizes padded to the vector width): what recipes apply to
        self.padded_model = facts.padded_model
        # (the derived recipe's schedules take the GEMMs from the facts instead of analysing each program)
        self.recipe = _recipes.resolve(self.padded_model, self.target, recipe, facts)
        if not self.recipe.knobs:
            raise ValueError(f"recipe {self.recipe.name!r} has no knobs to tune")
        unknown = set(knobs or {}) - set(self.recipe.knobs)
        if unknown:
            raise ValueError(f"recipe {self.recipe.name!r} has no knobs {sorted(unknown)}")
        self.knobs = {k: list((knobs or {}).get(k, v)) for k, v in self.recipe.knobs.items()}
        self._checked: dict = {}      # point -> None (valid) or the ScheduleError text
        self._scheduled: dict = {}    # point -> its finalized RecSchedule, or the ScheduleError

    @property
    def kernel_model(self):
        """Deprecated: the old name of `padded_model`."""
        warnings.warn("Space.kernel_model is deprecated; use Space.padded_model", DeprecationWarning, stacklevel=2)
        return self.padded_model

    @property
    def fingerprint(self) -> str:
        """"name@hash" of the recipe's steps and knob candidates: logs made with another version differ."""
        import hashlib
        text = json.dumps([list(self.recipe.steps), self.recipe.knobs], sort_keys=True, default=str)
        return f"{self.recipe.name}@{hashlib.sha256(text.encode()).hexdigest()[:10]}"

    @property
    def size(self) -> int:
        """Points in the cartesian product, valid or not."""
        return int(np.prod([len(v) for v in self.knobs.values()]))

    def points(self):
        """Every point of the product, valid or not, in knob order."""
        names = list(self.knobs)
        for values in itertools.product(*self.knobs.values()):
            yield TuningPoint.of(**dict(zip(names, values)))

    def contains(self, point: TuningPoint) -> bool:
        """Whether the point is in the product (its knobs and values are this space's)."""
        d = point.as_dict()
        return set(d) == set(self.knobs) and all(d[k] in v for k, v in self.knobs.items())

    def recipe_for(self, point: TuningPoint) -> _recipes.Recipe:
        return _recipes.with_precision(self.recipe.with_knobs(**point.as_dict()), self.precision)

    def check(self, point: TuningPoint):
        """None if the point's recipe applies to the model, else the ScheduleError's text."""
        if point not in self._checked:
            try:
                self.recipe_for(point).apply(RecSchedule(self.padded_model.lower(specialize_leaves=False)))
                self._checked[point] = None
            except ScheduleError as err:
                self._checked[point] = str(err)
        return self._checked[point]

    def scheduled(self, point: TuningPoint) -> RecSchedule:
        """The point's schedule applied and finalized (no build): the program it would compile.
        Remembered, so the cost model's features and a validity check apply it once; raises
        ScheduleError when it does not apply."""
        if point not in self._scheduled:
            try:
                rs = self.recipe_for(point).apply(RecSchedule(self.padded_model.lower(specialize_leaves=False)))
                rs.finalize()
                self._scheduled[point] = rs
            except ScheduleError as err:
                self._checked[point] = str(err)
                self._scheduled[point] = err
        found = self._scheduled[point]
        if isinstance(found, ScheduleError):
            raise found
        self._checked.setdefault(point, None)
        return found

    def is_valid(self, point: TuningPoint) -> bool:
        return self.check(point) is None

    def valid_points(self) -> list:
        """All valid points (checks the whole product: for small spaces)."""
        return [p for p in self.points() if self.is_valid(p)]

    def default(self) -> TuningPoint:
        """The point the recipe itself picks (first candidates that fit)."""
        fitted = self.recipe.fitted(lambda: RecSchedule(self.padded_model.lower(specialize_leaves=False)))
        return TuningPoint.of(**{k: v for k, v in fitted.knob_values().items() if k in self.knobs})

    def random(self, rng: np.random.Generator) -> TuningPoint:
        """A point of the product, uniformly, not checked."""
        return TuningPoint.of(**{k: v[int(rng.integers(len(v)))] for k, v in self.knobs.items()})

    def sample(self, n: int, rng: np.random.Generator, exclude=(), valid: bool = True) -> list:
        """Up to `n` distinct points not in `exclude`; checked for validity unless valid=False."""
        exclude, out, seen = set(exclude), [], set()
        for _ in range(50 * n + 100):
            if len(out) == n:
                break
            p = self.random(rng)
            if p in exclude or p in seen:
                continue
            seen.add(p)
            if not valid or self.is_valid(p):
                out.append(p)
        return out
