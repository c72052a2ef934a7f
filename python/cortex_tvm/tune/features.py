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

from ..schedule import RecSchedule, derive
from ..schedule.derive import REDUCE, STACK_BYTES, column_vectors, dividing_vectors
from ..target import cpu_info


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


@dataclass(frozen=True)
class ProgramFacts:
    """What a derived schedule's cost depends on, read off the program and the CPU once per space:
    the GEMM blocks (middle accumulators, output columns, reduction length, leaf or not) and the
    CPU's vector lanes, registers and cores.  Features built from these transfer between models,
    sizes and CPUs better than raw knob values do (derived_vector still has a few of those)."""

    gemms: tuple               # ((middle, columns, reduction, is_leaf), ...)
    lanes: int
    registers: int
    cores: int

    @classmethod
    def of(cls, kernel_model, target) -> "ProgramFacts":
        info = cpu_info(target)
        rs = RecSchedule(kernel_model.lower(specialize_leaves=True))
        leaves = set(rs.block_names("leaves"))
        gemms = []
        for g in derive.gemms(rs):
            block = rs.sch.get(rs._block(g.block))
            reduction = 1
            for iv in block.iter_vars:
                if iv.iter_type == REDUCE:
                    reduction *= int(iv.dom.extent)
            gemms.append((g.middle, g.columns, reduction, g.block in leaves))
        return cls(tuple(gemms), info.lanes, info.registers, info.cores)


#: length of a `derived_vector`
FEATURES = 27
#: features added after cost data were recorded, with the value they have in older rows
#: (persistent_threads did not exist: a fork and join per level)
ADDED_FEATURES = (("persistent_threads", 0.0),)


def complete(features: list) -> list:
    """A feature vector recorded before the `ADDED_FEATURES` existed, with their values appended."""
    missing = FEATURES - len(features)
    if not 0 <= missing <= len(ADDED_FEATURES):
        raise ValueError(f"a cost-data row has {len(features)} features; this version has {FEATURES}")
    return list(features) + [value for _, value in ADDED_FEATURES[len(ADDED_FEATURES) - missing:]]


def derived_vector(knobs: dict, facts: ProgramFacts, stats: WorkloadStats) -> list:
    """Features of one derived-schedule point: the register tile each GEMM gets against the
    register file, its arithmetic intensity, padding waste, parallel balance, the work left at
    run time; then the CPU and the workload.  Flop-weighted over the GEMMs."""
    nt, lanes = int(knobs["node_tile"]), int(knobs.get("lanes") or facts.lanes)
    rows = []
    for middle, columns, reduction, is_leaf in facts.gemms:
        if is_leaf and knobs.get("hoist"):
            continue                                  # a table lookup at run time
        vectors = dividing_vectors(column_vectors(middle, nt, lanes, facts.registers,
                                                  int(knobs["max_column_vectors"])), [columns], lanes)
        acc = nt * middle * vectors
        tiles = max(1, columns // (vectors * lanes))
        parallel = facts.cores if knobs.get("parallel_columns") else 1
        weight = middle * columns * reduction * (stats.level_mean if not is_leaf else 1.0)
        rows.append((weight, [acc, acc + nt + 1 - facts.registers, float(acc * lanes * 4 >= STACK_BYTES),
                              acc / (middle * vectors + nt), tiles, -(-tiles // parallel) * parallel / tiles,
                              middle * columns * reduction * 4 / 2**20]))
    if rows:
        total = sum(w for w, _ in rows) or 1.0
        tile = [sum(w * r[i] for w, r in rows) / total for i in range(len(rows[0][1]))]
    else:
        tile = [0.0] * 7
    level = max(stats.level_mean, 1.0)
    waste = (np.ceil(level / nt) * nt) / level
    run_flops = sum(2.0 * m * c * r * (stats.nodes if not leaf else stats.nodes / 2)
                    for m, c, r, leaf in facts.gemms if not (leaf and knobs.get("hoist")))
    return tile + [float(nt), float(waste), float(lanes) / facts.lanes, float(knobs.get("k_unroll", 1)),
                   float(knobs.get("unroll_depth", 1)), float(bool(knobs.get("parallel_columns"))) * facts.cores,
                   float(bool(knobs.get("hoist"))), np.log2(max(run_flops, 1.0)), float(facts.lanes),
                   float(facts.registers), float(len([g for g in facts.gemms if not g[3]]))] + stats.vector() \
        + [float(bool(knobs.get("persistent_threads")))]


def featurize(points, stats: WorkloadStats, facts: ProgramFacts | None = None) -> np.ndarray:
    """(len(points), F) float32 matrix: program features for derived-schedule points (with
    `facts`), raw knob values for hand-written recipes."""
    w = stats.vector()
    if facts is not None:
        return np.array([derived_vector(p.as_dict(), facts, stats) for p in points], dtype=np.float32)
    return np.array([knob_vector(p.as_dict(), stats.hidden) + w for p in points], dtype=np.float32)
