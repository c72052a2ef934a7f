"""The contract between RecSchedule's families: the state each one keeps besides the IR, and the
primitives one family replaces in another.

RecSchedule is put together from families (tiles.py, loops.py, gpu.py, ...), each a plain class
of primitives.  A primitive changes the IR and may change fields of the schedule: the blocks
tiled so far, the level-loop unroll depth, the scopes bound to the GPU.  A failed primitive
restores them all (`core.primitive`), so each such field is declared by the family that owns it,
next to its primitives:

    class TilePrimitives:
        #: blocks register-tiled so far (tile_gemm), in order
        tiled = State([])

and RecSchedule's `_STATE` is every declaration of its classes (`declared`).  A field set without
one would survive a rollback: the schedule refuses it by name.

Two families defining one name is an override (the first in RecSchedule's bases wins); the
winner says so in `OVERRIDES` (`check_overrides`), so that nothing is replaced by accident.
"""
from __future__ import annotations

import copy


class State:
    """A field of the schedule besides the IR, declared in the class that owns it.

    Every schedule starts with a copy of `initial` (``State([])``: a list of its own); a primitive
    that fails puts back the value it found."""

    def __init__(self, initial=None):
        self.initial = initial
        self.name = self.owner = None

    def __set_name__(self, owner, name):
        self.name, self.owner = name, owner

    def fresh(self):
        """The field's value in a new schedule."""
        return copy.copy(self.initial)

    def __repr__(self) -> str:
        owner = getattr(self.owner, "__name__", None)
        return f"State({self.initial!r}) of {owner}.{self.name}"


def declared(cls) -> dict:
    """name -> State: the fields declared by `cls` and its bases.

    Raises TypeError when two classes declare the same name (each field has one owner)."""
    fields = {}
    for klass in reversed(cls.__mro__):
        for name, value in vars(klass).items():
            if not isinstance(value, State):
                continue
            if name in fields and fields[name].owner is not klass:
                raise TypeError(f"{cls.__name__}: state {name!r} is declared by both "
                                f"{fields[name].owner.__name__} and {klass.__name__}")
            fields[name] = value
    return fields


def check_overrides(cls) -> None:
    """TypeError when two unrelated classes among `cls`'s bases define one name and the one that
    wins (the first in the MRO) does not list the name in its `OVERRIDES`.

    A subclass redefining its base's method is ordinary Python and not checked; two sibling
    families defining the same primitive is an override that must be meant."""
    families = [k for k in cls.__mro__[1:] if k is not object]
    for i, winner in enumerate(families):
        for loser in families[i + 1:]:
            if issubclass(winner, loser) or issubclass(loser, winner):
                continue
            for name in set(vars(winner)) & set(vars(loser)):
                if name.startswith("__") or name == "OVERRIDES":
                    continue
                if name not in getattr(winner, "OVERRIDES", ()):
                    raise TypeError(f"{cls.__name__}: {winner.__name__}.{name} replaces {loser.__name__}.{name}; "
                                    f"list {name!r} in {winner.__name__}.OVERRIDES if that is meant")
