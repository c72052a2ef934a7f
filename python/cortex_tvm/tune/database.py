"""The tuning log: JSON lines, one record per trial, append-only.

A record: `{"workload": {...}, "knobs": {...}, "latencies": [s, ...], "mean": s | null,
"error": text | null, "time": unix seconds, "cortex_tvm": version, "tvm": version,
"target_detail": full target string, "warm": bool}`.  A failed trial has mean null (inf in
memory).  A line that does not parse is skipped with a warning naming it.

How points rank (`Database.top_k`, and so `best` and `compile(tuning_log=...)`):
- A search ends by re-timing its leaders in turn (`Measurer.retime`): their records carry
  `"in_turn"`, the time that re-timing began, and the same value for all of them.  While no
  trial of the workload is newer than the latest such re-timing, its points rank first, by
  those in-turn times alone: timed side by side, they compare; trials timed minutes apart on
  a VM that drifts up to 2x do not.
- Otherwise (and for the points after those) a point ranks by the median of its warm
  measurements: the first trial of a tuning run (`warm: false`) pays for the process's first
  builds and the thread pool's start, so it counts only while it is the point's one
  measurement.
"""
from __future__ import annotations

import json
import math
import os
import statistics
import time
import warnings
from dataclasses import dataclass, field, replace

import tvm

from ..version import __version__
from .space import TuningPoint
from .workload import Workload


@dataclass(frozen=True)
class TuningRecord:
    workload: Workload
    point: TuningPoint
    latencies: tuple = ()
    error: str | None = None
    time: float = 0.0
    versions: dict = field(default_factory=dict, compare=False)
    target_detail: str = ""
    #: "name@hash" of the recipe the knobs belong to (its steps and candidates change over time)
    recipe: str = ""
    #: the schedule steps the knobs produced (replayable with RecSchedule.replay): the record of
    #: what was measured, which stays meaningful when the recipe changes later
    trace: tuple = field(default=(), compare=False)
    #: False for the first trial of a tuning run, timed while the process was still cold
    warm: bool = field(default=True, compare=False)
    #: when the in-turn re-timing this record belongs to began (unix seconds); None for a trial
    in_turn: float | None = field(default=None, compare=False)

    @property
    def mean(self) -> float:
        if self.error is not None or not self.latencies:
            return math.inf
        return sum(self.latencies) / len(self.latencies)

    def to_json(self) -> dict:
        mean = self.mean
        return {"workload": self.workload.to_json(), "knobs": self.point.to_json(),
                "latencies": list(self.latencies), "mean": None if math.isinf(mean) else mean,
                "error": self.error, "time": self.time, **self.versions, "target_detail": self.target_detail,
                "recipe": self.recipe, "trace": list(self.trace), "warm": self.warm,
                "in_turn": self.in_turn}

    @classmethod
    def from_json(cls, data: dict) -> "TuningRecord":
        return cls(Workload.from_json(data["workload"]), TuningPoint.from_json(data["knobs"]),
                   tuple(float(t) for t in data.get("latencies") or ()), data.get("error"),
                   float(data.get("time", 0.0)),
                   {k: data[k] for k in ("cortex_tvm", "tvm") if k in data}, data.get("target_detail", ""),
                   data.get("recipe", ""), tuple(data.get("trace") or ()), bool(data.get("warm", True)),
                   _optional_float(data.get("in_turn")))


def versions() -> dict:
    return {"cortex_tvm": __version__, "tvm": tvm.__version__}


class Database:
    """Records in memory, mirrored to a JSON-lines file (path None: memory only)."""

    def __init__(self, path=None):
        self.path = None if path is None else os.fspath(path)
        self.records: list = []
        if self.path is not None and os.path.exists(self.path):
            self.records = load_records(self.path)

    def commit(self, record: TuningRecord) -> None:
        """Append one record (flushed to disk at once, so an interrupted run loses nothing)."""
        self.records.append(record)
        if self.path is not None:
            line = json.dumps(record.to_json(), sort_keys=True)
            with open(self.path, "a", encoding="utf-8") as f:
                f.write(line + "\n")
                f.flush()
                os.fsync(f.fileno())

    def for_workload(self, workload: Workload) -> list:
        return [r for r in self.records if r.workload == workload]

    def measured(self, workload: Workload) -> dict:
        """point -> its latest record for this workload (what a resumed run skips)."""
        return {r.point: r for r in self.for_workload(workload)}

    def top_k(self, workload: Workload, k: int = 1, by_median: bool = False) -> list:
        """The k fastest points' latest records: the points of the workload's current in-turn
        re-timing first, by their in-turn times, then the rest by `typical` (the module's
        docstring says why).  by_median: rank every point by `typical` (how the search picks
        the leaders it re-times)."""
        return [records[-1] for _, records in self._ranked(workload, by_median)[:k]]

    def standing(self, workload: Workload, point) -> float:
        """The seconds `point` ranks by (inf when it has no successful record)."""
        return dict(self.ranking(workload)).get(point, math.inf)

    def ranking(self, workload: Workload, by_median: bool = False) -> list:
        """[(point, seconds it ranks by)], fastest first, as `top_k` ranks them."""
        return [(records[-1].point, seconds) for seconds, records in self._ranked(workload, by_median)]

    def in_turn(self, workload: Workload) -> dict:
        """point -> its record in the workload's current in-turn re-timing ({} when there is
        none, or a trial was logged after it)."""
        records = self.for_workload(workload)
        session = max((r.in_turn for r in records if r.in_turn is not None), default=None)
        if session is None or any(r.in_turn is None and r.time > session for r in records):
            return {}
        return {r.point: r for r in records if r.in_turn == session and math.isfinite(r.mean)}

    def _ranked(self, workload: Workload, by_median: bool) -> list:
        """[(seconds, the point's successful records)], fastest first."""
        settled = {} if by_median else self.in_turn(workload)
        by_point = self.measurements(workload)
        first = sorted(((r.mean, by_point[p]) for p, r in settled.items()), key=lambda pair: pair[0])
        rest = sorted(((typical(rs), rs) for p, rs in by_point.items() if p not in settled), key=lambda pair: pair[0])
        return first + rest

    def measurements(self, workload: Workload) -> dict:
        """point -> its successful records for this workload, oldest first."""
        by_point = {}
        for r in self.for_workload(workload):
            if math.isfinite(r.mean):
                by_point.setdefault(r.point, []).append(r)
        return by_point

    def best(self, workload: Workload):
        """The fastest successful point's latest record for exactly this workload, or None."""
        top = self.top_k(workload, 1)
        return top[0] if top else None

    def nearest(self, workload: Workload):
        """(record, how): the best record of this workload (how="exact"), else of the closest
        workload with the same model and target (how="nearest"), else (None, "none").

        A workload with batch_size None matches any batch size: the batch size
        with the most trials is used.
        """
        candidates = [r.workload for r in self.records
                      if r.workload.same_kind(workload) and math.isfinite(r.mean)]
        if workload.batch_size is None:
            same = [w for w in candidates if w == _with_batch(workload, w.batch_size)]
            if same:
                batch = max(set(w.batch_size for w in same), key=lambda b: (same.count(_with_batch(workload, b)), b))
                return self.best(_with_batch(workload, batch)), "exact"
        elif workload in candidates:
            return self.best(workload), "exact"
        if not candidates:
            return None, "none"
        probe = workload if workload.batch_size is not None else _with_batch(workload, 10)
        closest = min(set(candidates), key=lambda w: (probe.distance(w), str(w)))
        return self.best(closest), "nearest"


def typical(records) -> float:
    """The median of the records' means, leaving out cold ones (the first trial of a run) when
    the point was also measured warm."""
    warm = [r.mean for r in records if r.warm]
    return statistics.median(warm or [r.mean for r in records])


def _optional_float(value):
    return None if value is None else float(value)


def _with_batch(workload: Workload, batch_size) -> Workload:
    return replace(workload, batch_size=batch_size)


def load_records(path) -> list:
    """Records of a JSON-lines log; corrupt lines are skipped with a warning naming the line."""
    out = []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                out.append(TuningRecord.from_json(json.loads(line)))
            except (ValueError, KeyError, TypeError, AttributeError) as err:
                warnings.warn(f"tuning log {path}, line {lineno}: skipped a corrupt record ({err})",
                              stacklevel=2)
    return out


def now() -> float:
    return time.time()
