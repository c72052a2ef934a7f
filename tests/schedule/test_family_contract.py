"""The contract between RecSchedule's families (schedule/state.py): each field a primitive keeps
besides the IR is declared by the family that owns it and rolled back when a primitive fails; a
field set without a declaration is refused; one family replacing another's primitive says so."""
import pytest

import cortex_tvm as ct
from cortex_tvm.schedule import RecSchedule, ScheduleError
from cortex_tvm.schedule.core import RecScheduleCore, primitive
from cortex_tvm.schedule.gpu import GpuPrimitives
from cortex_tvm.schedule.kernels import KernelPrimitives
from cortex_tvm.schedule.levels import LevelPrimitives
from cortex_tvm.schedule.loops import LoopPrimitives
from cortex_tvm.schedule.state import State
from cortex_tvm.schedule.tiles import TilePrimitives

_LOWERED = []


def lowered():
    if not _LOWERED:
        _LOWERED.append(ct.models.TreeFC(hidden_size=16, vocab_size=10).lower(specialize_leaves=False))
    return _LOWERED[0]


def test_each_field_is_declared_by_its_family():
    owners = {name: field.owner for name, field in RecSchedule._STATE.items()}
    assert owners == {"lowered": RecScheduleCore, "plan": RecScheduleCore, "trace": RecScheduleCore,
                      "scheduled": RecScheduleCore, "_pending_decompose": RecScheduleCore,
                      "tiled": TilePrimitives, "unroll_depth": LoopPrimitives, "tail_tile": LevelPrimitives,
                      "persistent_levels": KernelPrimitives, "bound_scopes": GpuPrimitives,
                      "persistent_blocks": GpuPrimitives}
    rs, other = RecSchedule(lowered()), RecSchedule(lowered())
    assert set(vars(rs)) == set(RecSchedule._STATE) | {"sch", "_applying"}
    assert (rs.tiled, rs.unroll_depth, rs.tail_tile, rs.persistent_blocks) == ([], 1, 1, None)
    assert rs.tiled is not other.tiled and rs.bound_scopes is not other.bound_scopes   # a list each


class Counter:
    """A family with a field of its own, and primitives that change it."""

    #: how many times bump ran
    bumps = State(0)

    @primitive
    def bump(self, fail: bool = False):
        """Add one to `bumps`; then fail when asked."""
        self.bumps += 1
        self.tiled.append("bumped")
        if fail:
            raise ScheduleError("bump: asked to fail")
        return self

    @primitive
    def stash(self):
        """Set a field no family declares."""
        self.stashed = 1
        return self


class CountingSchedule(Counter, RecSchedule):
    pass


def test_a_declared_field_is_rolled_back_with_the_rest():
    rs = CountingSchedule(lowered()).bump()
    with pytest.raises(ScheduleError, match="asked to fail"):
        rs.bump(fail=True)
    assert rs.bumps == 1 and rs.tiled == ["bumped"] and [s.primitive for s in rs.trace] == ["bump"]


def test_a_field_set_without_a_declaration_is_refused():
    with pytest.raises(AssertionError, match=r"stash set \['stashed'\], which no family declares"):
        CountingSchedule(lowered()).stash()


def test_two_families_cannot_own_one_field():
    class Tiles:
        tiled = State([])
    with pytest.raises(TypeError, match="state 'tiled' is declared by both"):
        type("Clash", (Tiles, RecSchedule), {})


def test_an_override_between_families_is_declared():
    assert RecSchedule.single_kernel is GpuPrimitives.single_kernel
    assert "single_kernel" in GpuPrimitives.OVERRIDES

    class Quiet:
        def per_level_kernels(self):
            """Replaces kernels.py's, unannounced."""
    with pytest.raises(TypeError, match=r"Quiet.per_level_kernels replaces KernelPrimitives.per_level_kernels"):
        type("Replaced", (Quiet, RecSchedule), {})

    class Announced:
        OVERRIDES = ("per_level_kernels",)

        def per_level_kernels(self):
            """Replaces kernels.py's, and says so."""
    assert type("Replaced", (Announced, RecSchedule), {}).per_level_kernels is Announced.per_level_kernels

    class Mine(RecSchedule):                     # a subclass redefining a method: ordinary Python
        def finalize(self):
            """Nothing to do."""
            return self
    assert Mine(lowered()).finalize() is not None
