"""The batch statistics the cost model sees, and knob features for hand-written recipes.

`WorkloadStats` are the shape statistics of the tuning batches (sizes, node and level
counts, every level's size).  A derived-schedule point is featurized from its scheduled
program (`program_features`); a hand-written recipe's knobs mean only what that recipe
makes of them, so its points are featurized by their raw values (booleans as 0/1), their
base-2 logs and a few products (register tile, tiles per hidden size), plus the workload.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np



@dataclass(frozen=True)
class WorkloadStats:
    """Shape statistics of the tuning batches (means over batches), and every level above the
    leaves of all of them (`internal_levels`, unpadded): what the program features evaluate
    a kernel's extents on."""

    hidden: int
    embed: int
    batch_size: int
    nodes: float = 0.0
    levels: float = 0.0
    level_mean: float = 0.0
    level_max: float = 0.0
    level_std: float = 0.0
    #: leaves per batch (mean)
    leaves: float = 0.0
    #: the sizes of every level above the leaves, over all `batches`
    internal_levels: tuple = ()
    batches: int = 1

    def __post_init__(self):
        object.__setattr__(self, "internal_levels", tuple(int(s) for s in self.internal_levels))

    @classmethod
    def of(cls, model, batches) -> "WorkloadStats":
        hidden = int(model.hidden_size)
        embed = int(getattr(model, "embed_size", hidden))
        if not batches:
            return cls(hidden, embed, 0)
        rows, internal = [], []
        for batch in batches:
            lin = model.linearize(batch)
            sizes = lin.level_sizes.astype(float)
            rows.append((lin.num_slots - 1, lin.num_levels, sizes.mean(), sizes.max(), sizes.std(), sizes[0]))
            internal += [int(s) for s in lin.level_sizes[1:]]
        *means, leaves = (float(v) for v in np.mean(rows, axis=0))
        return cls(hidden, embed, len(batches[0]), *means, leaves=leaves, internal_levels=tuple(internal),
                   batches=len(batches))

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
    """(len(points), F) float32 matrix of raw knob values and the workload: the features of
    hand-written recipes' points (a derived schedule's points are featurized from their
    programs, `cost_model.SpaceFeaturizer`)."""
    w = stats.vector()
    return np.array([knob_vector(p.as_dict(), stats.hidden) + w for p in points], dtype=np.float32)
