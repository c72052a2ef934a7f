"""The xgboost ranking model learns an order; judged by Spearman, not by seconds."""
import itertools

import numpy as np
import pytest

from cortex_tvm.tune import CostModel, TuningPoint, WorkloadStats, spearman

pytest.importorskip("xgboost")


def synthetic():
    points = [TuningPoint.of(column_tile=c, node_tile=n, k_unroll=k)
              for c, n, k in itertools.product([16, 32, 64, 128], [1, 2, 3, 4], [1, 2, 4, 8])]
    # a monotone cost: bigger tiles and more unrolling are faster
    cost = [1.0 / (p.as_dict()["column_tile"] * 1.0 + 7 * p.as_dict()["node_tile"] + 3 * p.as_dict()["k_unroll"])
            for p in points]
    return points, cost


def test_spearman():
    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    assert spearman([1, 1, 2], [5, 5, 6]) == pytest.approx(1.0)


def test_ranks_held_out_points(tmp_path):
    points, cost = synthetic()
    order = np.random.default_rng(0).permutation(len(points))
    train, test = order[:32], order[32:]
    model = CostModel(WorkloadStats(64, 64, 10)).update([points[i] for i in train], [cost[i] for i in train])
    scores = model.predict([points[i] for i in test])
    assert spearman(-scores, [cost[i] for i in test]) > 0.8      # higher score = faster
    model.save(tmp_path / "model.json")
    loaded = CostModel.load(tmp_path / "model.json")
    np.testing.assert_allclose(loaded.predict([points[i] for i in test]), scores, rtol=1e-6)


def test_untrained_and_failures():
    model = CostModel(WorkloadStats(64, 64, 10))
    assert not model.trained and list(model.predict([TuningPoint.of(column_tile=16)])) == [0.0]
    points, cost = synthetic()
    model.update(points[:3] + points[3:6], cost[:3] + [float("inf")] * 3)   # failures are left out
    assert model.trained
    with pytest.raises(ValueError):
        CostModel(WorkloadStats(64, 64, 10)).save("never.json")
