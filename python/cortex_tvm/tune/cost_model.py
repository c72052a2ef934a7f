"""A learned cost model that ranks tuning points: xgboost with a pairwise ranking objective.

It is judged by how well it orders configurations (Spearman correlation on
held-out points), not by its error in seconds: the search only needs the
order.  xgboost is imported when the model is first trained or loaded.
"""
from __future__ import annotations

import json

import numpy as np

from .features import WorkloadStats, featurize

PARAMS = {"objective": "rank:pairwise", "eta": 0.2, "max_depth": 4, "min_child_weight": 0.0,
          "subsample": 1.0, "lambda": 1.0, "verbosity": 0, "nthread": 1}


class CostModel:
    """`update(points, latencies)` trains; `predict(points)` scores (higher = faster)."""

    def __init__(self, stats: WorkloadStats, rounds: int = 60, seed: int = 0, facts=None, prior=None):
        self.stats, self.rounds, self.seed, self.facts = stats, rounds, seed, facts
        #: a pre-trained booster (the shipped model) to start from: predictions before the first
        #: update come from it, and updates continue its trees
        self._prior = self._booster = prior

    @property
    def trained(self) -> bool:
        return self._booster is not None

    def update(self, points, latencies) -> "CostModel":
        """Retrain on all measured points (failures, inf latencies, are left out)."""
        import xgboost as xgb
        keep = [(p, t) for p, t in zip(points, latencies) if np.isfinite(t)]
        if len(keep) < 2:
            return self
        x = featurize([p for p, _ in keep], self.stats, self.facts)
        # relevance: faster is more relevant; -log keeps ratios, not seconds, meaningful
        y = -np.log(np.array([t for _, t in keep], dtype=np.float64))
        data = xgb.DMatrix(x, label=y)
        data.set_group([len(keep)])
        self._booster = xgb.train({**PARAMS, "seed": self.seed}, data, num_boost_round=self.rounds,
                                  xgb_model=self._prior)
        return self

    def predict(self, points) -> np.ndarray:
        """Scores, higher = predicted faster; zeros before the first update."""
        if not self.trained or not points:
            return np.zeros(len(points))
        import xgboost as xgb
        return self._booster.predict(xgb.DMatrix(featurize(points, self.stats, self.facts)))

    def save(self, path) -> None:
        if not self.trained:
            raise ValueError("cost model: nothing to save before the first update")
        self._booster.save_model(str(path))
        with open(f"{path}.meta.json", "w", encoding="utf-8") as f:
            json.dump({"stats": self.stats.__dict__, "rounds": self.rounds, "seed": self.seed}, f)

    @classmethod
    def load(cls, path) -> "CostModel":
        import xgboost as xgb
        with open(f"{path}.meta.json", encoding="utf-8") as f:
            meta = json.load(f)
        model = cls(WorkloadStats(**meta["stats"]), meta["rounds"], meta["seed"])
        model._booster = xgb.Booster()
        model._booster.load_model(str(path))
        return model


def spearman(a, b) -> float:
    """Spearman rank correlation of two sequences (average ranks for ties)."""
    def ranks(v):
        v = np.asarray(v, dtype=np.float64)
        order = np.argsort(v, kind="mergesort")
        r = np.empty(len(v))
        r[order] = np.arange(len(v))
        for value in np.unique(v):          # ties share their mean rank
            tie = v == value
            r[tie] = r[tie].mean()
        return r
    ra, rb = ranks(a), ranks(b)
    ra, rb = ra - ra.mean(), rb - rb.mean()
    denom = np.sqrt((ra ** 2).sum() * (rb ** 2).sum())
    return float((ra * rb).sum() / denom) if denom > 0 else 0.0
