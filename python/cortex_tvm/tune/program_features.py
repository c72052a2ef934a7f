"""Features read off a scheduled kernel's TIR: what the cost model sees of a candidate.

A derived-schedule point is judged by the program it produces, not by its knob values: for
every store, its loop nest (extents; parallel, vectorized, unrolled), its FLOPs, its register
tile (the spatial loops below the outermost reduction loop) with that tile's vector and
broadcast loads, and the bytes it reads per thread.  TVM's `PerStoreFeature` is the model; it
does not serve these kernels as it is (node loops run to `level_offsets[l + 1] -
level_offsets[l]`, a run-time value, and it merges the stores of one buffer).  So run-time
values become placeholders and each extent is evaluated for every level of the batch
statistics, padded to the node tile the program divides its levels by (the stores and the
placeholders: `program_stores`).

    vector = program_vector(rs.func, stats, machine)     # a list of FEATURES floats
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import tvm_ffi
from tvm import tirx

from .. import tir_rewrites
from ..level_tails import SEPARATE_TILES
from ..target import STACK_BYTES, Machine
from .program_stores import Store, evaluate, stand_in, stores

LAUNCH_POINT = "pragma_parallel_launch_point"
PARALLEL, VECTORIZED, UNROLLED = (int(k) for k in (tirx.ForKind.PARALLEL, tirx.ForKind.VECTORIZED,
                                                    tirx.ForKind.UNROLLED))


def _padded_to(func) -> int:
    """The multiple the runtime pads level sizes to: the node tile, or 1 when the levels end
    in tails (`level_tails`) instead."""
    if func.attrs is not None and func.attrs.get(SEPARATE_TILES, False):
        return 1
    return _node_tile(func)


def _node_tile(func) -> int:
    """The multiple the program divides level sizes by (`pad_level_extents`), 1 when none."""
    found = []

    def on_div(e):
        if tir_rewrites.is_level_size(e.a) and isinstance(e.b, tirx.IntImm):
            found.append(int(e.b.value))
    tvm_ffi.structural_walk(func.body, (tirx.FloorDiv, on_div))
    return max(found) if found else 1


@dataclass
class Tile:
    """The register tile of a store: the spatial loops below its outermost reduction loop."""
    accumulators: int            # vector registers of accumulators
    pressure: int                # accumulators + operand vectors and broadcasts live per step
    loads_per_fma: float
    k_unroll: int


def tile_of(store: Store, env: dict) -> Tile:
    loops = store.loops
    reduce_at = next((i for i, lp in enumerate(loops) if lp.var not in store.index_vars and lp.kind != PARALLEL),
                     None)
    if not store.accumulates or reduce_at is None:
        return Tile(0, 0, 0.0, 1)
    below = loops[reduce_at:]
    spatial = [lp for lp in below if lp.var in store.index_vars]
    acc_elems = math.prod(evaluate(lp.extent, env) for lp in spatial)
    vector = [lp for lp in below if lp.kind == VECTORIZED]
    width = math.prod(evaluate(lp.extent, env) for lp in vector) or 1
    accumulators = max(1, acc_elems // width)
    unrolled = [lp for lp in below if lp.kind in (UNROLLED, VECTORIZED)]
    k_unroll = math.prod(evaluate(lp.extent, env) for lp in unrolled if lp.var not in store.index_vars)
    fmas = max(1, math.prod(evaluate(lp.extent, env) for lp in unrolled) // width)
    loads, live = 0, 0
    vector_vars = {lp.var for lp in vector}
    per_step = [lp for lp in unrolled if lp.var in store.index_vars]
    for _, used, _bytes in store.reads:
        touched = math.prod(evaluate(lp.extent, env) for lp in unrolled if lp.var in used)
        step = math.prod(evaluate(lp.extent, env) for lp in per_step if lp.var in used)
        if used & vector_vars:
            loads += max(1, touched // width)
            live += max(1, step // width)
        else:
            loads += touched            # broadcasts
            live += step
    return Tile(accumulators, accumulators + live, loads / fmas, max(1, k_unroll))


def _bytes_per_thread(store: Store, env: dict, cores: int) -> float:
    """The largest read buffer's bytes one thread touches for one execution of the stage."""
    parallel = [lp for lp in store.loops if lp.kind == PARALLEL]
    share = 1.0
    if parallel:
        extent = math.prod(evaluate(lp.extent, env) for lp in parallel)
        share = math.ceil(extent / cores) / max(extent, 1)
    best = 0.0
    for _, used, nbytes in store.reads:
        elems = math.prod(evaluate(lp.extent, env) for lp in store.loops if lp.var in used)
        best = max(best, elems * nbytes * (share if any(lp.var in used for lp in parallel) else 1.0))
    return best


@dataclass(frozen=True)
class Gemm:
    """One reduction of a level (a GEMM over the level's nodes, or a child sum)."""
    block: str
    tile: Tile
    lanes: int                   # the vectorized loop's width
    bytes_per_thread: float      # its largest operand's bytes one thread reads per level
    parallel_extent: int         # iterations of its parallel loops (1: none)
    flop_share: float            # its share of the level FLOPs
    accumulator_bytes: int       # bytes of one accumulator element (its output's dtype)


@dataclass(frozen=True)
class ProgramSummary:
    """What one scheduled kernel does on one batch shape, read off its TIR (per batch)."""
    flops_leaves: float
    flops_levels: float          # above the leaves, every level of the batch, padding included
    flops_roots: float
    vector_ops_levels: float     # executions of level stores, a vector counting once
    scalar_ops_levels: float     # of those, executions of stores with no vectorized loop
    node_tile: int               # the multiple the program divides level sizes by
    padding_waste: float         # padded level slots / real level slots
    gemms: tuple                 # the level's reductions (Gemm), most FLOPs first
    leaf_gemm: Tile | None
    parallel_loops_per_level: int
    persistent: bool             # one parallel region for the level loop (a launch point)
    stores_per_level: int

    @property
    def gemm(self) -> Gemm | None:
        """The level reduction with the most FLOPs."""
        return self.gemms[0] if self.gemms else None


#: names of the features, in order (the cost data store vectors in this order)
NAMES = (
    "log2_flops_leaves", "log2_flops_levels", "log2_flops_roots", "log2_vector_ops_levels",
    "scalar_fraction_levels",
    # the level's reductions, FLOP-weighted (the worst of them where named so)
    "gemm_accumulators", "gemm_register_excess", "gemm_worst_register_excess", "gemm_spills",
    "gemm_loads_per_fma", "gemm_worst_loads_per_fma", "gemm_k_unroll", "gemm_lanes_vs_native",
    "gemm_parallel_tiles_per_core", "gemm_parallel_balance", "gemm_flop_share", "gemms_per_level",
    # the bytes of their operands one thread reads per level, summed, against the caches
    "log2_bytes_per_thread", "bytes_vs_l1", "bytes_vs_l2", "bytes_vs_l3",
    "leaf_accumulators", "leaf_loads_per_fma", "leaf_flop_share",
    "padding_waste", "parallel_loops_per_level", "persistent", "stores_per_level",
    "native_lanes", "registers", "cores", "log2_l1", "log2_l2", "log2_l3",
    "batch", "log2_nodes", "levels", "level_mean", "level_max", "level_std",
)
FEATURES = len(NAMES)


def summarize(func, stats, machine: Machine) -> ProgramSummary:
    """Walk the scheduled kernel `func` once and evaluate it on the batch shape `stats` (a
    WorkloadStats: every level above the leaves, the leaves, slots, levels and batch size)."""
    node_tile, pad = _node_tile(func), _padded_to(func)
    all_stores = stores(stand_in(func))
    levels = [int(s) for s in stats.internal_levels] or [max(1, round(stats.level_mean))]
    padded = [-(-s // pad) * pad for s in levels]
    leaves = -(-int(round(stats.leaves or stats.level_max)) // pad) * pad
    base = {"S_leaves": leaves, "S_slots": int(stats.nodes) + 1, "S_levels": round(stats.levels) + 1,
            "S_batch": max(1, stats.batch_size), "S_max": int(stats.level_max)}
    per_batch = 1.0 / max(1, stats.batches)       # internal_levels pool every batch
    leaf_env = {**base, "S_level": leaves}
    # the tile, widths, bytes and parallel extents are read at the median level's size
    mid = {**base, "S_level": sorted(padded)[len(padded) // 2]}

    def over_levels(fn):
        return sum(fn({**base, "S_level": size}) for size in padded) * per_batch

    def iterations(store, env):
        return math.prod(evaluate(lp.extent, env) for lp in store.loops)

    def width(store, env):
        return math.prod(evaluate(lp.extent, env) for lp in store.loops if lp.kind == VECTORIZED)

    flops = {"leaves": 0.0, "level": 0.0, "roots": 0.0}
    level_flops = {}
    vector_ops = scalar_ops = 0.0
    for st in all_stores:
        if st.stage == "level":
            level_flops[id(st)] = over_levels(lambda env, st=st: iterations(st, env) * st.flops)
            flops["level"] += level_flops[id(st)]
            ops = over_levels(lambda env, st=st: iterations(st, env) / max(1, width(st, env)))
            vector_ops += ops
            if width(st, mid) <= 1:
                scalar_ops += ops
        elif st.stage in flops:
            flops[st.stage] += iterations(st, leaf_env) * st.flops
    level_stores = [st for st in all_stores if st.stage == "level"]
    gemms = []
    for st in sorted((st for st in level_stores if st.accumulates), key=lambda st: -level_flops[id(st)]):
        parallel = [lp for lp in st.loops if lp.kind == PARALLEL]
        gemms.append(Gemm(st.block, tile_of(st, mid), max(1, width(st, mid)),
                          _bytes_per_thread(st, mid, machine.cores),
                          math.prod(evaluate(lp.extent, mid) for lp in parallel) if parallel else 1,
                          level_flops[id(st)] / max(flops["level"], 1.0), st.element_bytes))
    leaf_gemm = max((st for st in all_stores if st.stage == "leaves" and st.accumulates),
                    key=lambda st: iterations(st, leaf_env) * st.flops, default=None)
    level_parallel = {id(lp.var) for st in level_stores for lp in st.loops if lp.kind == PARALLEL}
    return ProgramSummary(
        flops["leaves"], flops["level"], flops["roots"], vector_ops, scalar_ops, node_tile,
        sum(padded) / max(1, sum(levels)), tuple(gemms),
        tile_of(leaf_gemm, leaf_env) if leaf_gemm else None,
        len(level_parallel), _has_annotation(func, LAUNCH_POINT), len({st.block for st in level_stores}))


def vector_of(summary: ProgramSummary, stats, machine: Machine) -> list:
    """The feature vector (NAMES) of a summary on a machine and batch shape."""
    lanes, cores = machine.lanes, machine.cores
    total = (summary.flops_leaves + summary.flops_levels + summary.flops_roots) or 1.0
    gemms = summary.gemms
    if gemms:
        weight = sum(g.flop_share for g in gemms) or 1.0

        def mean(fn):
            return sum(g.flop_share * fn(g) for g in gemms) / weight

        def balance(g):
            extent = g.parallel_extent
            return math.ceil(extent / cores) * cores / extent if extent > 1 else float(cores)
        nbytes = max(1.0, sum(g.bytes_per_thread for g in gemms))
        gemm_row = [mean(lambda g: g.tile.accumulators), mean(lambda g: g.tile.pressure - machine.registers),
                    max(g.tile.pressure for g in gemms) - machine.registers,
                    mean(lambda g: float(g.tile.accumulators * g.lanes * g.accumulator_bytes > STACK_BYTES)),
                    mean(lambda g: g.tile.loads_per_fma), max(g.tile.loads_per_fma for g in gemms),
                    mean(lambda g: g.tile.k_unroll), mean(lambda g: g.lanes / lanes),
                    mean(lambda g: g.parallel_extent / cores), mean(balance), weight, float(len(gemms)),
                    math.log2(nbytes), math.log2(nbytes / machine.l1), math.log2(nbytes / machine.l2),
                    math.log2(nbytes / machine.l3)]
    else:
        gemm_row = [0.0] * 16
    leaf = summary.leaf_gemm
    leaf_row = [leaf.accumulators, leaf.loads_per_fma] if leaf is not None else [0.0, 0.0]
    return ([_log2(summary.flops_leaves), _log2(summary.flops_levels), _log2(summary.flops_roots),
             _log2(summary.vector_ops_levels), summary.scalar_ops_levels / max(summary.vector_ops_levels, 1.0)]
            + gemm_row + leaf_row + [summary.flops_leaves / total]
            + [summary.padding_waste, float(summary.parallel_loops_per_level), float(summary.persistent),
               float(summary.stores_per_level)]
            + [float(lanes), float(machine.registers), float(cores), math.log2(machine.l1),
               math.log2(machine.l2), math.log2(machine.l3)]
            + [float(stats.batch_size), _log2(stats.nodes), float(stats.levels), float(stats.level_mean),
               float(stats.level_max), float(stats.level_std)])


def program_vector(func, stats, machine: Machine) -> list:
    """The features of one scheduled kernel for a batch shape on `machine`: see NAMES."""
    return vector_of(summarize(func, stats, machine), stats, machine)


def _log2(x: float) -> float:
    return math.log2(x + 1.0)


def _has_annotation(func, key: str) -> bool:
    found = []
    tvm_ffi.structural_walk(func.body, (tirx.For, lambda f: found.append(f) if key in f.annotations else None))
    return bool(found)
