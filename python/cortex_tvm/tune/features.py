"""Feature vectors for the cost model: a point's knobs plus the workload it runs on.

Knob features are the raw values (booleans as 0/1), their base-2 logs and a
few products the schedule cares about (register tile, tiles per hidden
size).  Workload features (sizes, node and level counts, level-size
statistics of the tuning batches) are constant within one tuning run and
let a model trained on one workload say something about another.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class WorkloadStats:
    """Shape statistics of the tuning batches (means over batches)."""

    hidden: int
    embed: int
    batch_size: int
    nodes: float = 0.0
    levels: float = 0.0
    level_mean: float = 0.0
    level_max: float = 0.0
    level_std: float = 0.0

    @classmethod
    def of(cls, model, batches) -> "WorkloadStats":
        hidden = int(model.hidden_size)
        embed = int(getattr(model, "embed_size", hidden))
        if not batches:
            return cls(hidden, embed, 0)
        rows = []
        for batch in batches:
            lin = model.linearize(batch)
            sizes = lin.level_sizes.astype(float)
            rows.append((lin.num_slots - 1, lin.num_levels, sizes.mean(), sizes.max(), sizes.std()))
        return cls(hidden, embed, len(batches[0]), *(float(v) for v in np.mean(rows, axis=0)))

    def vector(self) -> list:
        return [float(self.hidden), float(self.embed), float(self.batch_size), self.nodes, self.levels,
                self.level_mean, self.level_max, self.level_std]


def knob_vector(knobs: dict, hidden: int) -> list:
    """Numbers for one point's knobs, in sorted knob order, plus derived ones."""
    out = []
    for name in sorted(knobs):
        v = float(knobs[name])
        out += [v, float(np.log2(v)) if v > 0 else -20.0]
    if "column_tile" in knobs and "node_tile" in knobs:
        ct, nt = float(knobs["column_tile"]), float(knobs["node_tile"])
        out += [ct * nt, hidden / ct, float(hidden % int(ct) == 0)]
    return out


def featurize(points, stats: WorkloadStats) -> np.ndarray:
    """(len(points), F) float32 matrix."""
    w = stats.vector()
    return np.array([knob_vector(p.as_dict(), stats.hidden) + w for p in points], dtype=np.float32)
