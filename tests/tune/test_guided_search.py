"""The XGBoost-guided rounds of the search, past the random warm-up, beat random search on a
table of latencies (looked up, not built), with the same budget, over several seeds.

The table is a synthetic landscape, not this CPU's, so the search runs without the shipped
model as its prior (that prior is checked on real measurements in test_train_cost_model.py): what
is tested is the online model the rounds train on their own trials."""
import numpy as np
import pytest

import cortex_tvm as ct
from cortex_tvm.tune import Database, SearchConfig, Space, TuningPoint, Workload, WorkloadStats, search
from cortex_tvm.tune.measure import MeasureResult
from cortex_tvm.target import Machine
from cortex_tvm.tune.program_features import summarize

pytest.importorskip("xgboost")


STATS = WorkloadStats(32, 32, 10, 200, 12, 16, 40, 10, leaves=100.0, internal_levels=(40, 22, 12, 8, 6, 4, 3, 2, 1, 1))


class TableMeasurer:
    target = "table"

    def __init__(self, latency):
        self.latency = latency

    def measure(self, space, point):
        return MeasureResult((self.latency(space, point),))


_SUMMARIES = {}


def latency(space, point):
    """A cost of what the scheduled program does, as the program features see it: the register
    tile against the register file, the k-loop unrolling, the vector width, parallel columns,
    hoisted leaves and node padding; a smooth landscape whose best region is not the default
    point.  Knob values that give one program give one cost (a column-vector cap the register
    file clamps; the unroll depth, a build setting)."""
    if point not in _SUMMARIES:
        _SUMMARIES[point] = summarize(space.scheduled(point).func, STATS, Machine.of(space.target))
    s = _SUMMARIES[point]
    acc = s.gemm.tile.accumulators
    tile = abs(acc - 8) / 8 + (0.8 if s.gemm.tile.pressure > 32 else 0.0)
    return 1e-3 * (1 + tile + 0.05 * s.node_tile + 0.1 / s.gemm.tile.k_unroll
                   + (0.0 if s.parallel_loops_per_level else 0.3) + (0.0 if s.flops_leaves == 0 else 0.2)
                   + (0.0 if s.gemm.lanes == 16 else 0.25))


def best_after(space, trials, seed, guided):
    # warm-up = all trials: random search; warm-up 4: then rounds ranked by the cost model
    config = SearchConfig(trials=trials, seed=seed, warmup=trials if not guided else 4, confirm_rounds=0)
    workload = Workload.of(space.model, space.target, 10)
    record = search(space, TableMeasurer(latency), Database(), workload, STATS, config, log=None)
    return record.mean


def test_guided_rounds_beat_random_search(fc32, monkeypatch):
    import sys
    monkeypatch.setattr(sys.modules["cortex_tvm.tune.search"], "shipped_booster", lambda: None)
    # every program of the space is scheduled once (0.2-0.3 s each): a 144-point part of it
    space = Space(fc32, ct.make_target({"kind": "llvm", "mcpu": "znver4"}),
                  knobs={"node_tile": [3, 2, 1], "max_column_vectors": [4, 2, 1], "k_unroll": [8, 1], "unroll_depth": [1],
                         "persistent_threads": [False], "recursion_depth": [1], "level_tails": [True]})
    assert space.size == 144
    trials = 32                                    # > the warm-up: most trials are guided
    guided = [best_after(space, trials, seed, True) for seed in range(4)]
    random = [best_after(space, trials, seed, False) for seed in range(4)]
    optimum = min(latency(space, p) for p in space.valid_points())
    assert np.median(guided) < np.median(random), (guided, random)
    assert np.median(guided) <= optimum * 1.10, (guided, optimum)


def test_the_search_measures_and_confirms_the_default_and_the_ranked_pick(fc32):
    """The tune's winner is always measured against the analytic default and the shipped model's
    pick (what `compile(schedule="ranked")` builds): both are among the first trials and re-timed."""
    from cortex_tvm.tune.pretrained import choice
    space = Space(fc32)
    pick = choice(space.recipe, space.padded_model, space.target)
    assert pick is not None and space.contains(pick)
    measured = []

    class Recorder:
        target = "table"

        def measure(self, space, point):
            measured.append(point)
            return MeasureResult((latency(space, point),))
    config = SearchConfig(trials=6, seed=0, warmup=4, confirm_rounds=1)
    search(space, Recorder(), Database(), Workload.of(fc32, space.target, 10),
           STATS, config, log=None)
    assert measured[0] == space.default() and pick in measured[:2]
    assert measured[6:].count(pick) == 1 and measured[6:].count(space.default()) == 1     # confirm round
