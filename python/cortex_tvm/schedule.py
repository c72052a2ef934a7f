"""RecSchedule: schedule primitives for recursive programs, on top of s_tir.Schedule.

The lowered program has two stage scopes, the `leaves` block and the per-level
`level` block; the blocks inside them (one per RA compute) take every
s_tir primitive (`split`, `reorder`, `vectorize`, `parallel`, `cache_read`,
`compute_at`, `decompose_reduction`, ...) through this object.  Every call
is recorded in `trace` so a schedule can be shown and replayed.
"""
from __future__ import annotations

import tvm
from tvm import s_tir

from .lower import FUNC_NAME, Lowered

ScheduleError = s_tir.ScheduleError

STAGE_SCOPES = ("leaves", "level")


class RecSchedule:
    """A schedule of a lowered recursive program.

    Unknown attributes are forwarded to the underlying `tvm.s_tir.Schedule`
    (`rs.split(...)`, `rs.get_loops(...)`), so TVM's own primitives work on the
    blocks inside each stage.
    """

    def __init__(self, lowered: Lowered):
        self.lowered = lowered
        self.sch = s_tir.Schedule(lowered.mod)
        self.sch.work_on(FUNC_NAME)
        self.trace: list = []

    @property
    def mod(self) -> tvm.IRModule:
        return self.sch.mod

    @property
    def func(self):
        return self.sch.mod[FUNC_NAME]

    def show(self) -> str:
        return self.func.script()

    def stage_blocks(self, stage: str) -> list:
        """Names of the compute blocks inside a stage scope ("leaves" or "level"), in program order."""
        if stage not in STAGE_SCOPES:
            raise ValueError(f"unknown stage {stage!r}; stages are {STAGE_SCOPES}")
        scope = self.sch.get_sblock(stage)
        return [self.sch.get(b).name_hint for b in self.sch.get_child_blocks(scope)]

    def __getattr__(self, name):
        attr = getattr(self.sch, name)
        if not callable(attr):
            return attr

        def recorded(*args, **kwargs):
            self.trace.append((name, args, kwargs))
            return attr(*args, **kwargs)
        return recorded


# ----------------------------------------------------------------------------- a generic CPU schedule
def vectorize_blocks(rs: RecSchedule, lanes: int = 16) -> RecSchedule:
    """The default CPU schedule: vectorize the innermost output dimension of every block.

    Reductions get their reduce loops moved outside the vector lanes (so each
    lane accumulates one output) and their init split off.
    """
    sch = rs.sch
    for stage in STAGE_SCOPES:
        for name in rs.stage_blocks(stage):
            block = sch.get_sblock(name)
            loops = sch.get_loops(block)
            iters = sch.get(block).iter_vars
            stage_loops = loops[len(loops) - len(iters):]
            spatial = [l for l, iv in zip(stage_loops, iters) if iv.iter_type == 0]
            reduce = [l for l, iv in zip(stage_loops, iters) if iv.iter_type == 2]
            inner = spatial[-1]
            extent = sch.get(inner).extent
            if len(spatial) < 2 or not isinstance(extent, tvm.tirx.IntImm) or extent.value % lanes:
                continue
            outer, lane = sch.split(inner, [None, lanes])
            if reduce:
                sch.reorder(outer, *reduce, lane)
                sch.vectorize(lane)
                sch.decompose_reduction(block, reduce[0])
            else:
                sch.vectorize(lane)
    return rs
