"""Adaptive dispatch: per batch-size regime, the log's best configuration, chosen per call."""
import numpy as np
import pytest

from cortex_tvm import tune
from cortex_tvm.tune import Space, TuningPoint


def _log_with_regimes(model, path):
    """Records that make node_tile 1 best for batch 1 and node_tile 2 best for batch 10."""
    db = tune.Database(path)
    default = Space(model).default().as_dict()
    for batch, best_tile in ((1, 1), (10, 2)):
        for tile in (1, 2):
            point = TuningPoint.of(**{**default, "node_tile": tile})
            latency = 1e-3 if tile == best_tile else 2e-3
            db.commit(tune.TuningRecord(tune.Workload.of(model, batch_size=batch), point, (latency,)))


def test_each_regime_gets_its_best_config_and_numbers_match(fc32, trees, tmp_path):
    log = tmp_path / "regimes.jsonl"
    _log_with_regimes(fc32, log)
    adaptive = tune.AdaptiveModel(fc32, log, regimes=(1, 10))
    assert adaptive.recipes[1][0]["node_tile"] == 1 and adaptive.recipes[1][1] == "exact"
    assert adaptive.recipes[10][0]["node_tile"] == 2
    def whole_tiles(compiled):        # the node tile of the GEMMs' whole tiles (not their tails)
        return {s["args"]["node_tile"] for s in compiled.trace
                if s["primitive"] == "tile_gemm" and "_tail" not in s["args"]["block"]}
    assert whole_tiles(adaptive.compiled[1]) == {1} and whole_tiles(adaptive.compiled[10]) == {2}
    assert adaptive.regime(trees[:1]) == 1 and adaptive.regime(trees[:3]) == 1
    assert adaptive.regime(trees[:4]) == 10 and adaptive.regime(trees[:40]) == 10
    for batch in (trees[:1], trees[:10], trees[:25]):
        np.testing.assert_allclose(adaptive(batch), fc32.reference(batch), atol=1e-4)


def test_bad_regimes(fc32, tmp_path):
    with pytest.raises(ValueError, match="regimes"):
        tune.AdaptiveModel(fc32, tmp_path / "x.jsonl", regimes=(0,))
