"""Features read off the scheduled program (issue 18): each number is checked against what the
schedule was asked for and against arithmetic done here by hand, not against the extractor."""
import math

import numpy as np
import pytest
import tvm
from tvm import tirx

import cortex_tvm as ct
from cortex_tvm.tune.features import WorkloadStats
from cortex_tvm.target import Machine
from cortex_tvm.tune.cost_model import SpaceFeaturizer
from cortex_tvm.tune.program_features import FEATURES, NAMES, evaluate, program_vector, summarize
from cortex_tvm.tune.space import Space, TuningPoint

AVX2 = {"kind": "llvm", "mcpu": "haswell"}
#: a Zen 3 core's caches, given so the numbers do not depend on the host
CACHES = (32 * 1024, 512 * 1024, 32 * 1024 * 1024)
H = 64
LEVELS = (5, 3, 2, 1, 1)          # the levels above the leaves, one batch
STATS = WorkloadStats(H, H, 2, nodes=23.0, levels=6.0, level_mean=23 / 6, level_max=11.0, level_std=3.6,
                      leaves=11.0, internal_levels=LEVELS, batches=1)


@pytest.fixture(scope="module")
def lstm_space():
    return Space(ct.models.TreeLSTM(hidden_size=H, vocab_size=50), AVX2)


@pytest.fixture(scope="module")
def machine(lstm_space):
    return Machine.of(lstm_space.target, CACHES)


def point(space, **knobs):
    return TuningPoint.of(**{**space.default().as_dict(), **knobs})


def summary_of(space, machine, **knobs):
    return summarize(space.scheduled(point(space, **knobs)).func, STATS, machine)


def test_the_register_tile_is_read_off_the_program(lstm_space, machine):
    """TreeLSTM's gates are 5 rows per node: a node tile of 2 with one 8-lane column vector
    holds 2 x 5 accumulators; the inner step loads 5 U vectors and broadcasts 2 child values
    for those 10 FMAs."""
    s = summary_of(lstm_space, machine, node_tile=2, max_column_vectors=1, k_unroll=8)
    assert s.node_tile == 2 and s.gemm.lanes == 8
    assert s.gemm.tile.accumulators == 10
    assert s.gemm.tile.pressure == 10 + 5 + 2
    assert s.gemm.tile.loads_per_fma == pytest.approx((5 + 2) / 10)
    assert s.gemm.tile.k_unroll == 8
    one = summary_of(lstm_space, machine, node_tile=1, max_column_vectors=1, k_unroll=4)
    assert (one.node_tile, one.gemm.tile.accumulators, one.gemm.tile.k_unroll) == (1, 5, 4)
    assert one.gemm.tile.loads_per_fma == pytest.approx((5 + 1) / 5)


def test_level_flops_and_padding_follow_the_batch_levels(lstm_space, machine):
    """The level GEMM does 2 * (2H) * (5H) FLOPs per node slot; with a node tile of 2 and
    padded levels the levels 5, 3, 2, 1, 1 run as 6, 4, 2, 2, 2 slots; with tails
    (level_tails) as 5, 3, 2, 1, 1: each tail's guard counts at the level's own size."""
    tails = summary_of(lstm_space, machine, node_tile=2)
    assert tails.node_tile == 2 and tails.padding_waste == 1.0
    # the whole tiles' GEMM: 4, 2, 2, 0, 0 nodes; the tails' remainders 1, 1, 0, 1, 1 beside it
    assert tails.flops_levels * tails.gemm.flop_share == pytest.approx(8 * 2 * (2 * H) * (5 * H))
    exact = summary_of(lstm_space, machine, node_tile=1, level_tails=False)
    assert tails.flops_levels == pytest.approx(exact.flops_levels)
    s = summary_of(lstm_space, machine, node_tile=2, level_tails=False)
    padded = [6, 4, 2, 2, 2]
    assert s.padding_waste == pytest.approx(sum(padded) / sum(LEVELS))
    gemm_flops = sum(padded) * 2 * (2 * H) * (5 * H)
    assert s.flops_levels * s.gemm.flop_share == pytest.approx(gemm_flops)
    assert s.flops_levels > gemm_flops              # and the gate epilogue on top
    unpadded = summary_of(lstm_space, machine, node_tile=1)
    assert unpadded.padding_waste == 1.0
    assert unpadded.flops_levels * unpadded.gemm.flop_share == pytest.approx(sum(LEVELS) * 2 * (2 * H) * (5 * H))


def test_bytes_per_thread_split_with_the_columns(lstm_space, machine):
    """U is (2H) x (5H) float32; parallel columns give each of the 2 cores its half."""
    u_bytes = 2 * H * 5 * H * 4
    split = summary_of(lstm_space, machine, parallel_columns=True)
    whole = summary_of(lstm_space, machine, parallel_columns=False)
    assert machine.cores == 2
    assert whole.gemm.bytes_per_thread == u_bytes and whole.gemm.parallel_extent == 1
    assert split.gemm.bytes_per_thread == u_bytes / 2 and split.gemm.parallel_extent > 1
    assert (split.parallel_loops_per_level, whole.parallel_loops_per_level) == (1, 0)


def test_persistence_and_hoisting_show_in_the_program(lstm_space, machine):
    assert summary_of(lstm_space, machine, persistent_threads=True).persistent
    assert not summary_of(lstm_space, machine, persistent_threads=False).persistent
    hoisted = summary_of(lstm_space, machine, hoist=True)
    computed = summary_of(lstm_space, machine, hoist=False)
    assert hoisted.flops_leaves == 0 and hoisted.leaf_gemm is None        # a table lookup
    # the leaves' input GEMM: 11 leaves padded to 12, E=H inputs, 3 gates of H
    assert computed.flops_leaves >= 12 * 2 * H * 3 * H and computed.leaf_gemm.accumulators > 0


def test_the_vector_names_every_feature_and_no_knob(lstm_space, machine):
    v = program_vector(lstm_space.scheduled(lstm_space.default()).func, STATS, machine)
    assert len(v) == len(NAMES) == FEATURES and all(math.isfinite(x) for x in v)
    assert not set(NAMES) & set(lstm_space.knobs)
    named = dict(zip(NAMES, v))
    assert (named["native_lanes"], named["registers"], named["cores"]) == (8, 16, 2)
    assert named["log2_l2"] == 19.0 and named["batch"] == 2


def test_the_unroll_depth_is_not_in_the_features(lstm_space, machine):
    """unroll_levels splits and unrolls the level loop; the walk reads the loops inside a level,
    so two depths give one vector."""
    featurize = SpaceFeaturizer(lstm_space, STATS, machine)
    a, b = featurize([point(lstm_space, unroll_depth=1), point(lstm_space, unroll_depth=2)])
    np.testing.assert_array_equal(a, b)


def test_an_invalid_point_featurizes_as_missing(lstm_space, machine):
    featurize = SpaceFeaturizer(lstm_space, STATS, machine)
    bad = point(lstm_space, persistent_threads=True, parallel_columns=False)   # no parallel stage to share
    assert not lstm_space.is_valid(bad)
    assert np.isnan(featurize([bad])).all()


def test_evaluate_refuses_an_extent_it_cannot_read():
    x = tirx.Var("S_level", "int32")
    assert evaluate(tirx.floordiv(x + 3, 2) * 2, {"S_level": 5}) == 8
    with pytest.raises(ValueError, match="cannot evaluate an extent"):
        evaluate(tvm.tirx.Select(x > 1, x, x), {"S_level": 5})


def test_machine_caches_come_from_the_host_unless_given(lstm_space):
    host = Machine.of(lstm_space.target)
    assert host.l1 > 0 and host.l2 >= host.l1 and host.l3 >= host.l2
    given = Machine.of(lstm_space.target, CACHES)
    assert (given.l1, given.l2, given.l3) == CACHES and given.lanes == host.lanes == 8


def test_a_bfloat16_weight_counts_two_bytes(machine):
    """store_bf16 keeps U packed as bfloat16 (uint16): the bytes a thread reads halve, while
    the accumulators stay float32 (4 bytes, what the stack-limit feature counts)."""
    model = ct.models.TreeLSTM(hidden_size=H, vocab_size=50)
    fp32, bf16 = Space(model, AVX2), Space(model, AVX2, precision="bf16")
    whole = {"parallel_columns": False}
    a, b = summary_of(fp32, machine, **whole), summary_of(bf16, machine, **whole)
    assert a.gemm.bytes_per_thread == 2 * H * 5 * H * 4
    assert b.gemm.bytes_per_thread == 2 * H * 5 * H * 2
    assert a.gemm.accumulator_bytes == b.gemm.accumulator_bytes == 4
