"""A CPU schedule derived from the program and the target, for any RA model.

No recipe is written per model: the program says which blocks are
reductions against a weight (GEMMs, with the node's inputs gathered in the
A operand), which are other reductions (child sums, per-node matrix
products) and which are elementwise; the target says how wide a vector
register is and how many there are.  From that:

- every GEMM's weight is packed so a column tile is contiguous (gates
  interleaved when the weight's rows are blocks indexed by a middle axis),
  and the GEMM becomes a register-tiled micro-kernel whose accumulators
  (node_tile x middle x column vectors) fit the register file, with its
  elementwise consumers computed inside the tile from the accumulators;
- levels are not padded to the node tile (`level_tails`, knob level_tails): each level runs
  its whole tiles, then its last `size % node_tile` nodes in a tile of that many, so a level
  of one node costs one node's FLOPs (TreeLSTM H=256 on Zen 5: 1.17x faster at batch 1,
  1.11x at 10, 1.07x at 64); recursive unrolling keeps the padding;
- other reductions and elementwise stages are vectorized at the native width; a per-node
  matrix product whose broadcast operand is a weight row (MV-RNN's WM [A_l; A_r]) gets a
  register tile of rows x column vectors (`reduction_tile`);
- leaves are hoisted into per-word tables when the leaf case reads only the
  word; column tiles run in parallel across cores (a weight only the leaf level
  reads, such as a projection of per-node features, in narrower tiles where that
  cuts each core's columns by more than 1/8: `dividing_vectors`), and so do the nodes of a
  stage that is not a weight GEMM when it does at least PARALLEL_NODE_WORK
  iterations per node (the knob parallel_columns=False keeps every stage
  on one core); with `persistent_threads`,
  the level loop is one parallel region (a barrier per stage instead of a
  fork and join; off by default: on the 2-core Zen 3 measured it ranged from
  7% slower to 10% faster by model and size, docs/benchmarks.md).

`derive(rs, info, **knobs)` applies it; `knob_space(widest_middle, info, unrollable=False)`
lists the knobs' candidates with the analytic default first (`widest_middle`: the accumulators
per node and column vector of the program's widest GEMM).
"""
from __future__ import annotations

import tvm
import tvm_ffi

from .. import level_tails as _tails
from ..plan import FUNC_NAME
from ..schedule.core import REDUCE, ScheduleError
from ..schedule.core import SPATIAL as _SPATIAL
# (derive.gemms, derive.Gemm, derive.find_gemm: where callers have found them)
from ..schedule.gemms import ACCUMULATOR, Gemm, expr_vars, find_gemm, gemms, out_dtype, with_tail_copies  # noqa: F401
from ..target import STACK_BYTES, bytes_of

#: iterations per node (`work_per_node`; multiply-adds for a reduction) from which a stage that
#: is not a weight GEMM runs its nodes across cores (parallel_nodes): a 64 x 64 matrix-vector
#: product.  A child sum or an elementwise step of the zoo's usual sizes is far below it (a
#: fork and join per level would buy nothing); an 8-child sum at H=512 reaches it
PARALLEL_NODE_WORK = 4096


def fits(accumulators: int, node_tile: int, lanes: int, registers: int, dtype=ACCUMULATOR) -> bool:
    """A register tile fits: its accumulators, one broadcast per node and one spare register in
    the register file, and the accumulators (vectors of `lanes` elements of `dtype`) under the
    stack limit."""
    return accumulators + node_tile + 1 <= registers and accumulators * lanes * bytes_of(dtype) <= STACK_BYTES


def column_vectors(gemm_middle: int, node_tile: int, lanes: int, registers: int, most: int,
                   dtype=ACCUMULATOR) -> int:
    """The most column vectors (<= most) whose register tile `fits`; at least 1."""
    return max([v for v in range(1, most + 1)
                if fits(node_tile * gemm_middle * v, node_tile, lanes, registers, dtype)], default=1)


#: the cut in each core's columns (`dividing_vectors`) that a narrower tile must exceed to be taken
MIN_BALANCE_GAIN = 0.125


def dividing_vectors(vectors: int, columns, lanes: int, cores: int = 1) -> int:
    """The column vectors, at most `vectors`, of a tile that divides every extent in `columns`:
    the widest, unless a narrower one shares the tiles among `cores` so much more evenly that
    each core's columns drop by more than MIN_BALANCE_GAIN (`parallel_columns`: TVM hands each
    core ceil(tiles / cores) of them); then the narrower with the fewest columns a core.

    TreeLSTM fed 768 features at H=160 (padded from 150), whose leaves' GEMM reads W in tiles
    of the three gates' columns: two vectors (32 columns) make 5 tiles, 3 and 2 on two cores
    (96 columns for one core); one vector makes 10, 5 each (80): the kernel 8-16% faster on
    Zen 4 (batch 1, 10, 64).  A smaller cut does not pay for the narrower tile's extra loads:
    ChildSum's three gates at H=100 (padded to 112: 7 tiles of 3 vectors, 21 of one; 12 against
    11 vectors a core) ran 5-6% slower with one vector at batch 10 and 64, TreeGRU's two at
    H=100 (8 against 7) 2-4% slower; where the cut is exactly 1/8 the evidence is mixed
    (TreeGRU H=200 and AVX2 TreeGRU H=100 1-4% faster at batch 10 and 64)."""
    fitting = [v for v in range(1, vectors + 1) if not any(c % (v * lanes) for c in columns)] or [1]

    def per_core(v):
        return sum(-(-(c // (v * lanes)) // cores) * v for c in columns)
    widest = max(fitting)
    narrower = [v for v in fitting if per_core(v) < (1 - MIN_BALANCE_GAIN) * per_core(widest)]
    return min(narrower, key=lambda v: (per_core(v), -v)) if narrower else widest


def weight_tiles(found: list, node_tile: int, lanes: int, registers: int, most: int, cores: int = 1,
                 balanced=frozenset()) -> dict:
    """weight -> column tile: the widest that divides every reader's columns and fits each reader;
    for the weights in `balanced` (`leaf_weights`), among those that share the columns most
    evenly among `cores` (`dividing_vectors`).

    Only the leaf level's weights: it holds every leaf of the batch at once.  An internal
    level holds one to three nodes at batch 1, and there the narrower tile's extra column
    tiles cost more than the balance gains (Zen 4, 2 cores, in-process A/Bs: TreeFC H=64 and
    300 15% slower at batch 1, SeqGRU H=64 14% slower at batch 10; DAG-RNN H=150 14-15% faster
    at batch 10 and 64, TreeGRU H=300 5-6%)."""
    tiles = {}
    for weight in {g.weight for g in found}:
        readers = [g for g in found if g.weight == weight]
        vectors = min(column_vectors(g.middle, node_tile, lanes, registers, most, g.dtype) for g in readers)
        vectors = dividing_vectors(vectors, [g.columns for g in readers], lanes,
                                   cores if weight in balanced else 1)
        tiles[weight] = vectors * lanes if all(g.columns % lanes == 0 for g in readers) else None
    return tiles


def column_cores(info, parallel_columns: bool) -> int:
    """The cores that share a weight's column tiles: the CPU's with `parallel_columns`, else one."""
    return info.cores if parallel_columns and info.cores > 1 else 1


def leaf_weights(rs, found) -> frozenset:
    """The weights that only the leaf level's GEMMs read in the kernel (not in hoisted tables,
    `hoist`, which run once on the weights): a model fed per-node features projects them so,
    and so does a word-input model built without leaf tables (hoist=False, training=True)."""
    leaves = set(rs.block_names("leaves")) if rs.has_block("leaves") else set()
    return frozenset(w for w in {g.weight for g in found} if all(g.block in leaves for g in found if g.weight == w))


def _leaves_compute(rs) -> bool:
    """Whether the leaf case does arithmetic worth a table (a reduction), not just a gather."""
    return any(iv.iter_type == REDUCE for name in rs.block_names("leaves")
               for iv in rs.sch.get(rs._block(name)).iter_vars)


def _is_untransformed(rs, name):
    b = rs._block(name)
    return len(rs.sch.get_loops(b)) == len(rs.sch.get(b).iter_vars)


def derive(rs, info, node_tile: int = 3, max_column_vectors: int = 4, lanes: int | None = None,
           k_unroll: int = 8, hoist: bool = True, parallel_columns: bool = True,
           unroll_depth: int = 1, persistent_threads: bool = False, recursion_depth: int = 1,
           level_tails: bool = True, program_gemms=None):
    """Apply the derived schedule to a fresh RecSchedule (see the module docstring); returns rs.

    recursion_depth > 1: CORTEX's recursive unrolling (`unroll_recursion`, one chunk of
    groups per core) instead of parallel columns and level-loop unrolling.  program_gemms:
    `gemms` of rs's program with its leaves specialized, when known (else found here)."""
    lanes = lanes or info.lanes
    unrolled = recursion_depth > 1
    parallel_columns = parallel_columns and not unrolled
    found = _prepare(rs, node_tile, hoist, level_tails and not unrolled, program_gemms)
    tiles = weight_tiles(found, node_tile, lanes, info.registers, max_column_vectors,
                         column_cores(info, parallel_columns), leaf_weights(rs, found))
    for weight, tile in sorted(tiles.items()):
        if tile is not None:
            g = next(g for g in found if g.weight == weight)
            rs.pack(weight, axis=g.axis, tile=tile, groups=g.groups)
    for name in rs.scratchpads():
        rs.dense_index(name)
    for g in found:
        if tiles[g.weight] is not None and _is_untransformed(rs, g.block):
            # a tail's copy of the GEMM (level_tails) takes its r nodes in one tile
            rs.tile_gemm(g.block, node_tile=_tails.node_set(g.block) or node_tile, column_tile=tiles[g.weight],
                         lanes=lanes, k_unroll=k_unroll)
    if parallel_columns and info.cores > 1:
        for weight in sorted(w for w, t in tiles.items() if t is not None):
            rs.parallel_columns(weight)
    for name in rs.block_names():
        if not _is_untransformed(rs, name):
            continue
        try:
            rs.vectorize_block(name, lanes=lanes)
            continue
        except ScheduleError:
            pass
        rows, vectors = reduction_tile(rs, name, info, lanes)
        try:
            rs.vectorize_reduction(name, lanes=lanes, rows=rows, vectors=vectors)
        except ScheduleError:
            continue
    if parallel_columns and info.cores > 1:
        for name in rs.block_names("level"):
            if name not in rs.tiled and work_per_node(rs, name) >= PARALLEL_NODE_WORK:
                rs.parallel_nodes(name)
    if unrolled:
        rs.unroll_recursion(recursion_depth, chunks=max(info.cores, 1))
    else:
        rs.unroll_levels(unroll_depth)
    if persistent_threads:
        rs.persistent_threads()        # refused (the point is invalid) without a parallel stage
    return rs


def _prepare(rs, node_tile: int, hoist: bool, level_tails: bool = True, program_gemms=None) -> list:
    """derive's first steps (leaves specialized, maybe hoisted, fast math, levels split into
    whole tiles and a tail, or padded): the GEMMs (from `program_gemms` when given)."""
    rs.specialize_leaves()
    if hoist and _leaves_compute(rs):
        try:
            rs.hoist()
        except ScheduleError:
            pass               # the leaves read more than a word, or the tables are too large
    rs.fast_math()
    if level_tails:
        rs.level_tails(node_tile)
    else:
        rs.pad_levels(node_tile)
    return gemms(rs) if program_gemms is None else with_tail_copies(rs, program_gemms)


def distinct_points(points, make_schedule, info, program_gemms=None) -> list:
    """The points of `points` (knob dicts) whose derived kernels differ, first of each kept.

    `max_column_vectors` is a cap: where the register file clamps two caps to the same column
    tiles of the kernel's GEMMs, the two points give one kernel (a hoisted leaf table's tile,
    computed once at load, may still differ).  Telling that apart costs derive's first steps
    once per (node tile, hoist), not a whole schedule per point."""
    found, seen, out = {}, set(), []
    for knobs in points:
        nt, hoist = int(knobs.get("node_tile", 3)), bool(knobs.get("hoist", True))
        if (nt, hoist) not in found:
            rs = make_schedule()
            gemms_found = _prepare(rs, nt, hoist, program_gemms=program_gemms)
            # a hoisted leaf table is computed once from the weights, outside the kernel
            kernel = {g.weight for g in gemms_found if rs._function_of(g.block) == FUNC_NAME}
            found[(nt, hoist)] = (gemms_found, kernel, leaf_weights(rs, gemms_found))
        gemms_found, kernel, balanced = found[(nt, hoist)]
        lanes = knobs.get("lanes") or info.lanes
        cores = column_cores(info, knobs.get("parallel_columns", True) and knobs.get("recursion_depth", 1) <= 1)
        tiles = weight_tiles(gemms_found, nt, lanes, info.registers, int(knobs.get("max_column_vectors", 4)), cores,
                             balanced)
        key = (tuple(sorted((k, v) for k, v in knobs.items() if k != "max_column_vectors")),
               tuple(sorted((w, t) for w, t in tiles.items() if w in kernel)))
        if key not in seen:
            seen.add(key)
            out.append(knobs)
    return out


def work_per_node(rs, name: str) -> int:
    """Iterations of a block per node: the product of its iterators' extents but the node's."""
    work = 1
    for iv in rs.sch.get(rs._block(name)).iter_vars[1:]:
        if not isinstance(iv.dom.extent, tvm.tirx.IntImm):
            return 0
        work *= int(iv.dom.extent)
    return work


def reduction_tile(rs, name: str, info, lanes: int) -> tuple:
    """(rows, vectors) for `vectorize_reduction`: a per-node matrix product whose broadcast
    operand is a weight row, out[n, i, j] += W[i, k] * B[.., k, j], gets the largest register
    tile that fits (the B vectors stay live across the rows, one W scalar at a time); any
    other reduction (a child sum) keeps one vector per step: (1, 1)."""
    block = rs.sch.get(rs._block(name))
    spatial = [iv for iv in block.iter_vars if iv.iter_type == _SPATIAL]
    reduce_vars = {iv.var for iv in block.iter_vars if iv.iter_type == REDUCE}
    if len(spatial) < 3 or not all(isinstance(iv.dom.extent, tvm.tirx.IntImm) for iv in spatial[-2:]):
        return 1, 1
    row, column = spatial[-2], spatial[-1]
    weights = {n for n, _, _ in rs.signature.model_weights()}
    rows_of_weight = []

    def on_load(ld):
        used = set().union(*(expr_vars(e) for e in ld.indices)) if ld.indices else set()
        if ld.source.name in weights and row.var in used and used <= reduce_vars | {row.var}:
            rows_of_weight.append(ld)
    tvm_ffi.structural_walk(block.body, (tvm.ir.TensorLoad, on_load))
    if not rows_of_weight:
        return 1, 1
    best = (1, 1)
    for rows in (6, 4, 3, 2, 1):
        for vectors in (4, 2, 1):
            if (int(row.dom.extent) % rows or int(column.dom.extent) % (vectors * lanes)
                    or not fits(rows * vectors, vectors, lanes, info.registers, out_dtype(block))):
                continue
            if rows * vectors > best[0] * best[1]:
                best = (rows, vectors)
    return best


def node_tiles(middle: int, info) -> list:
    """Node tiles whose GEMM tile with one column vector fits the registers, largest first.

    AVX-512 (32 registers of 16 lanes), LSTM gates (middle 5): [5, 4, 3, 2, 1]: 5 x 5
    accumulators and 5 broadcasts use 31 registers.  AVX2 (16 of 8): [2, 1].
    """
    return [t for t in (6, 5, 4, 3, 2, 1) if fits(t * middle, t, info.lanes, info.registers)] or [1]


#: the node tile of the default point unless `default_node_tile` grows it
SMALL_NODE_TILE = 3
#: the most accumulators a tile's k loop is unrolled 8 times with (`default_k_unroll`)
K_UNROLL_8_ACCUMULATORS = 16


def default_node_tile(middle: int, info) -> int:
    """The analytic default node tile: SMALL_NODE_TILE when it fits (else the largest that
    does); on a CPU with two FMA units per core (`CpuInfo.fma_units`), the tile that holds the
    most accumulators when that is more than the small one's (fewer nodes on a tie).

    Each step of the k loop loads the tile's weight vectors and one broadcast per node.  With
    two FMAs a cycle those loads are the limit, and a larger tile cuts them per FMA.  On Zen 5
    at H=256: TreeLSTM's 3 x 5 grows to 5 x 5 (25 accumulators: 1.31x faster at batch 10,
    1.34x at 64), TreeFC's and TreeGRU's 3 x 4 column vectors to 6 x 4 (24: 1.12-1.45x at batch
    10 and 64, equal or faster at 1, where levels end in tails, `level_tails`, not padding);
    ChildSum's 3 x 4 x 2 stays (24 either way, and 6 x 4 x 1 measured 4-7% slower).  The
    sequences and DAG-RNN take 6 x 4 too (1.08-1.36x at batch 10 and 64; at batch 1 the
    sequences 1-2% slower, DAG-RNN 5% faster);
    MV-RNN, whose cost is its per-node matrix product, runs 3-5% slower with it at batch 1
    and 64 (docs/benchmarks.md).  A tuning log for the batch size can pick any other (the tuner's
    space holds every tile that fits)."""
    tiles = node_tiles(middle, info)
    small = SMALL_NODE_TILE if SMALL_NODE_TILE in tiles else tiles[0]
    if info.fma_units < 2:
        return small

    def accumulators(t):
        return t * middle * column_vectors(middle, t, info.lanes, info.registers, 4)
    most = max(tiles, key=lambda t: (accumulators(t), -t))
    return most if accumulators(most) > accumulators(small) else small


def default_k_unroll(accumulators: int) -> int:
    """The k-loop unroll of the default point: 8, or 4 for a tile of more than
    K_UNROLL_8_ACCUMULATORS accumulators, where the loads LLVM hoists ahead of 8 unrolled steps
    no longer fit beside them and spill (AVX-512 on Zen 5: ChildSum's 3 x 4 x 2 tile 1.2x
    faster at 4, TreeLSTM's 5 x 5 spill-free only at 4; an AVX2 tile holds at most 14)."""
    return 8 if accumulators <= K_UNROLL_8_ACCUMULATORS else 4


def knob_space(widest_middle: int, info, unrollable: bool = False) -> dict:
    """The derived schedule's knobs for a program whose widest GEMM has `widest_middle`
    accumulators per node and column vector, with the analytic default first.

    unrollable (trees and sequences, not DAGs): the space also holds CORTEX's recursive
    unrolling (`recursion_depth` 2), which the analytic default and the shipped cost model's
    candidates leave out: measured, it never paid on a CPU (docs/unrolling.md)."""
    default = default_node_tile(widest_middle, info)
    node_tile = [default] + [t for t in node_tiles(widest_middle, info) if t != default]
    lanes = [info.lanes] + ([info.lanes // 2] if info.lanes > 4 else [])
    accumulators = default * widest_middle * column_vectors(widest_middle, default, info.lanes, info.registers, 4)
    k_unroll = default_k_unroll(accumulators)
    return {"node_tile": node_tile, "max_column_vectors": [4, 2, 1, 8], "lanes": lanes,
            "k_unroll": [k_unroll] + [k for k in (8, 4, 1) if k != k_unroll],
            "level_tails": [True, False], "hoist": [True, False], "parallel_columns": [True, False],
            "unroll_depth": [1, 2, 3], "persistent_threads": [False, True],
            **({"recursion_depth": [1, 2]} if unrollable else {})}
