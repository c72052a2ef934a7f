"""Named schedules ("recipes") per model and target, and how a name is resolved."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from .schedule import RecSchedule, vectorize_blocks


@dataclass(frozen=True)
class Recipe:
    name: str
    apply_fn: Callable
    #: rows of each level are padded to a multiple of this (register tiles of nodes)
    node_tile: int = 1
    #: weights the recipe wants in another layout: name -> function(array) -> array
    packs: tuple = ()

    def apply(self, rs: RecSchedule) -> RecSchedule:
        return self.apply_fn(rs) or rs


_RECIPES = {
    "none": Recipe("none", lambda rs: rs),
    "vectorize": Recipe("vectorize", vectorize_blocks),
}
_DEFAULT = "vectorize"


def names() -> list:
    return sorted(_RECIPES)


def resolve(model, target, schedule) -> Recipe:
    if schedule is None:
        return _RECIPES[_DEFAULT]
    if isinstance(schedule, Recipe):
        return schedule
    if callable(schedule):
        return Recipe(getattr(schedule, "__name__", "custom"), schedule)
    if isinstance(schedule, str):
        if schedule not in _RECIPES:
            raise ValueError(f"unknown schedule {schedule!r}; known: {names()}")
        return _RECIPES[schedule]
    raise TypeError(f"schedule must be a recipe name or a callable, got {type(schedule).__name__}")
