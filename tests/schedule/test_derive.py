"""The derived schedule: GEMM detection from the program, register tiles from the CPU, and the
IR it produces, the register-tiled reductions included (vectorize_reduction, the primitive it uses
for reductions not against a weight, has its own tests in test_vectorize_reduction.py)."""
import numpy as np
import pytest
import tvm

import cortex_tvm as ct
from cortex_tvm.policy import derive
from cortex_tvm.target import CpuInfo

from .irutil import loops_around

K = tvm.tirx.ForKind
AVX512 = CpuInfo(lanes=16, registers=32, cores=2, isa="avx512", mcpu="znver4")
AVX2 = CpuInfo(lanes=8, registers=16, cores=2, isa="avx2", mcpu="haswell", fma_units=2)
ZEN5 = CpuInfo(lanes=16, registers=32, cores=2, isa="avx512", mcpu="znver5", fma_units=2)


def _specialized(model):
    rs = ct.RecSchedule(model.lower(specialize_leaves=False))
    return rs.specialize_leaves()


def test_gemms_of_tree_lstm():
    found = {g.block: g for g in derive.gemms(_specialized(ct.models.TreeLSTM(32, 50, embed_size=24)))}
    assert set(found) == {"leaf_gates_sum", "gates_sum"}
    # U[g * H + i, j * H + k]: rows are five gate blocks indexed by the middle axis g
    assert found["gates_sum"] == derive.Gemm("gates_sum", "U", axis=0, groups=5, columns=32, middle=5)
    assert found["leaf_gates_sum"] == derive.Gemm("leaf_gates_sum", "W", axis=0, groups=3, columns=32, middle=3)


def test_gemms_of_other_layouts():
    gru = {g.block: g for g in derive.gemms(_specialized(ct.models.TreeGRU(16, 50)))}
    assert gru["gates_sum"] == derive.Gemm("gates_sum", "U", axis=0, groups=1, columns=48, middle=1)
    assert gru["candidate_sum"].weight == "Uh"
    mv = {g.block for g in derive.gemms(_specialized(ct.models.MVRNN(8, 50)))}
    # internal_A reads WM by a middle axis, not by its output column: a vectorized reduction instead
    assert "internal_a_sum" in mv and "internal_A" not in mv and "mixed" not in mv
    seq = {g.block: g for g in derive.gemms(_specialized(ct.models.SeqLSTM(16, 50)))}
    # W_ih[r, e] * emb[word[child], e]: the embedding row is the A operand, W_ih the weight
    assert seq["input_gates_sum"].weight == "W_ih" and seq["hidden_gates_sum"].weight == "W_hh"


@pytest.mark.parametrize("info,middle,want", [(AVX512, 5, [5, 4, 3, 2, 1]), (AVX2, 5, [2, 1]),
                                              (AVX512, 1, [6, 5, 4, 3, 2, 1]), (AVX2, 1, [6, 5, 4, 3, 2, 1])])
def test_node_tiles_fit_the_register_file(info, middle, want):
    assert derive.node_tiles(middle, info) == want
    for t in want:
        assert t * middle + t + 1 <= info.registers


def test_column_vectors_fit_registers_and_stack():
    assert derive.column_vectors(5, 3, 16, 32, most=4) == 1          # 15 accumulators
    assert derive.column_vectors(1, 3, 16, 32, most=4) == 4          # 12 accumulators, 768 B
    assert derive.column_vectors(1, 6, 16, 32, most=8) == 4          # 6 x 5 + 7 would pass 32 registers
    assert derive.column_vectors(5, 3, 8, 16, most=4) == 1           # spills, but never below one vector
    # the stack limit: 33 accumulators of 64 B would pass 2 KiB even with registers to spare
    assert not derive.fits(33, 1, 16, 64) and derive.fits(32, 1, 16, 64)


@pytest.mark.parametrize("info,middle,tile,k_unroll", [
    (AVX512, 5, 3, 8),        # one FMA unit (Zen 4): 3 nodes, 15 accumulators
    (ZEN5, 5, 5, 4),          # two, and 3 x 5 is one column vector: the largest tile, 25 accumulators
    (ZEN5, 1, 6, 4),          # TreeFC, TreeGRU: 6 x 4 column vectors, 24 accumulators against 3 x 4's 12
    (ZEN5, 4, 3, 4),          # ChildSum's gates: 3 x 4 x 2 = 24 accumulators, as many as 6 x 4 x 1: 3 nodes
    (AVX2, 5, 2, 8),          # AVX2's 16 registers hold 2 x 5 whatever the units
    (AVX2, 1, 3, 8),
])
def test_default_node_tile_and_k_unroll_follow_the_fma_units(info, middle, tile, k_unroll):
    space = derive.knob_space(middle, info)
    assert space["node_tile"][0] == derive.default_node_tile(middle, info) == tile
    assert sorted(space["node_tile"]) == sorted(derive.node_tiles(middle, info))
    assert space["k_unroll"][0] == k_unroll and sorted(space["k_unroll"]) == [1, 4, 8]


def test_fma_units_by_cpu():
    from cortex_tvm.target import cpu_info
    assert cpu_info({"kind": "llvm", "mcpu": "znver5"}).fma_units == 2
    assert cpu_info({"kind": "llvm", "mcpu": "znver4"}).fma_units == 1
    assert cpu_info({"kind": "llvm", "mcpu": "sapphirerapids"}).fma_units == 2
    assert cpu_info({"kind": "llvm", "mcpu": "haswell"}).fma_units == 2
    assert cpu_info({"kind": "llvm", "mcpu": "znver4", "mattr": ["-avx512f"]}).fma_units == 2   # AVX2 code


def test_derived_ir_for_tree_lstm():
    model = ct.models.TreeLSTM(32, 50)
    rs = derive.derive(ct.RecSchedule(model.lower(specialize_leaves=False)), AVX512)
    steps = [(s.primitive, s.args) for s in rs.trace]
    assert ("pack", {"weight": "U", "axis": 0, "tile": 16, "groups": 5}) in steps
    assert ("tile_gemm", {"block": "gates_sum", "node_tile": 3, "column_tile": 16, "lanes": 16, "k_unroll": 8}) in steps
    assert ("hoist", {"budget_mb": 64.0}) in steps and ("parallel_columns", {"weight": "U"}) in steps
    loops = loops_around(rs.func, "gates_sum")
    assert loops[-1].kind == K.VECTORIZED and int(loops[-1].extent) == 16
    assert [l.kind for l in loops].count(K.PARALLEL) == 1
    # the LSTM epilogue runs inside the GEMM's column tile
    assert loops_around(rs.func, "internal_h")[0].same_as(loops[0]) or \
        str(loops_around(rs.func, "internal_h")[0].loop_var) == str(loops[0].loop_var)


def test_derived_ir_for_avx2_uses_8_lanes():
    rs = derive.derive(ct.RecSchedule(ct.models.TreeLSTM(32, 50).lower(specialize_leaves=False)), AVX2, node_tile=2)
    tiles = {s.args["block"]: s.args for s in rs.trace if s.primitive == "tile_gemm"}
    assert tiles["gates_sum"]["lanes"] == 8 and tiles["gates_sum"]["node_tile"] == 2
    assert tiles["gates_sum"]["column_tile"] == 8
    # the leaf tables of the parameter transform are tiled by the same rule
    assert tiles["leaf_gates_sum"]["lanes"] == 8 and tiles["leaf_gates_sum"]["node_tile"] == 2


def test_column_tiles_share_evenly_among_cores():
    """parallel_columns hands each core ceil(tiles / cores) column tiles: for the leaf level's
    GEMMs the derived schedule takes the widest tile among those that leave each core the
    fewest columns."""
    assert derive.dividing_vectors(2, [160], 16) == 2               # one core: the widest that divides
    assert derive.dividing_vectors(2, [160], 16, cores=2) == 1      # 5 tiles: 3 and 2; 10 tiles: 5 and 5
    assert derive.dividing_vectors(2, [256], 16, cores=2) == 2      # 8 tiles: 4 and 4
    assert derive.dividing_vectors(4, [64], 16, cores=2) == 2       # 1 tile would leave a core idle
    assert derive.dividing_vectors(4, [960], 16, cores=2) == 4      # 8 x 4 vectors a core; 10 x 3: too small a cut
    assert derive.dividing_vectors(3, [336], 16, cores=2) == 3      # 4 x 3 against 11 x 1: the same
    assert derive.dividing_vectors(2, [224], 16, cores=2) == 2      # 8 against 7: a cut of 1/8 is not enough
    assert derive.dividing_vectors(4, [150], 16, cores=2) == 1      # none divides
    # TreeLSTM fed features at H=160: the leaves' GEMM (three gates of W) in tiles of one
    # vector on two cores, of two on one; U's tile (one vector: 5 x 3 accumulators) is the same
    model = ct.models.TreeLSTM(160, embed_size=48, inputs="features")
    one_core = CpuInfo(lanes=16, registers=32, cores=1, isa="avx512", mcpu="znver4")
    for info, w_tile in ((AVX512, 16), (one_core, 32)):
        rs = derive.derive(ct.RecSchedule(model.lower(specialize_leaves=False)), info)
        packs = {s.args["weight"]: s.args["tile"] for s in rs.trace if s.primitive == "pack"}
        assert packs == {"W": w_tile, "U": 16}
        tiles = {s.args["block"]: s.args["column_tile"] for s in rs.trace if s.primitive == "tile_gemm"}
        assert tiles["leaf_gates_sum"] == w_tile and tiles["gates_sum"] == 16
    # without parallel columns one core takes them all: the widest tile
    rs = derive.derive(ct.RecSchedule(model.lower(specialize_leaves=False)), AVX512, parallel_columns=False)
    assert {s.args["weight"]: s.args["tile"] for s in rs.trace if s.primitive == "pack"}["W"] == 32
    # an internal level's GEMM keeps the widest tile (small levels: see weight_tiles): TreeFC
    # H=64's W is one tile of 64 columns on two cores
    rs = derive.derive(ct.RecSchedule(ct.models.TreeFC(64, 50).lower(specialize_leaves=False)), AVX512)
    assert {s.args["weight"]: s.args["tile"] for s in rs.trace if s.primitive == "pack"} == {"W": 64}


def test_register_tiled_reduction_ir_and_numbers():
    """MV-RNN's per-node matrix product A_sum[n, i, j] += WM[i, k] * A[child, k, j] (its broadcast
    operand is a weight row): derive tiles it 4 rows x 2 vectors, loop order and numbers checked;
    the state is written once, from its own accumulator (lowering splits a bare-sum state)."""
    model = ct.models.MVRNN(hidden_size=32, vocab_size=50)
    rs = _specialized(model)
    assert {"internal_A_sum", "internal_A"} <= set(rs.block_names())
    assert derive.reduction_tile(rs, "internal_A_sum", AVX2, 8) == (4, 2)
    assert derive.reduction_tile(rs, "mixed", AVX2, 8) == (1, 1)          # no weight row: one vector
    rs.vectorize_reduction("internal_A_sum", lanes=8, rows=4, vectors=2)
    loops = loops_around(rs.func, "internal_A_sum")[1:]
    # (node, row tile, column tile, child, k, 4 rows, 2 vectors, 8 lanes)
    assert [int(l.extent) for l in loops[1:]] == [8, 2, 2, 32, 4, 2, 8]
    assert [l.kind for l in loops[-3:]] == [K.UNROLLED, K.UNROLLED, K.VECTORIZED]
    trees = ct.data.random_trees(8, (1, 12), seed=4, vocab_size=50)
    np.testing.assert_allclose(rs.build(model)(trees), model.reference(trees), atol=1e-5)


def test_register_tile_bytes_come_from_the_accumulator_dtype():
    """The stack limit (STACK_BYTES) counts a tile's accumulators in their dtype's bytes: at 32
    lanes, 24 float32 accumulators are 3 KB (over 2 KB), 24 bfloat16 ones 1.5 KB."""
    assert derive.fits(12, 3, 32, 32) and not derive.fits(24, 3, 32, 32)
    assert derive.fits(24, 3, 32, 32, "bfloat16") and not derive.fits(24, 3, 32, 32, "float32")
    assert derive.column_vectors(4, 3, 32, 32, 4) == 1
    assert derive.column_vectors(4, 3, 32, 32, 4, "bfloat16") == 2
    fp32 = derive.Gemm("g", "W", axis=0, groups=1, columns=128, middle=4)
    bf16 = derive.Gemm("g", "W", axis=0, groups=1, columns=128, middle=4, dtype="bfloat16")
    assert derive.weight_tiles([fp32], 3, 32, 32, 4) == {"W": 32}
    assert derive.weight_tiles([bf16], 3, 32, 32, 4) == {"W": 64}
    # a GEMM's dtype is read off the program: the zoo sums in float32
    assert {g.dtype for g in derive.gemms(_specialized(ct.models.TreeLSTM(32, 50)))} == {"float32"}
