"""A learned cost model that ranks tuning points: xgboost with a pairwise ranking objective.

It is judged by how well it orders configurations (Spearman correlation on
held-out points), not by its error in seconds: the search only needs the
order.  xgboost is imported when the model is first trained or loaded.
"""
from __future__ import annotations

import json

import numpy as np

from ..schedule import ScheduleError
from ..target import Machine
from .features import WorkloadStats, featurize
from .program_features import FEATURES, program_vector

PARAMS = {"objective": "rank:pairwise", "eta": 0.2, "max_depth": 4, "min_child_weight": 0.0,
          "subsample": 1.0, "lambda": 1.0, "verbosity": 0, "nthread": 1}


class CostModel:
    """`update(points, latencies)` trains; `predict(points)` scores (higher = faster)."""

    def __init__(self, stats: WorkloadStats, rounds: int = 60, seed: int = 0, featurizer=None, prior=None):
        """featurizer: points -> (n, F) features (`SpaceFeaturizer` for the derived schedule);
        None: the knob features of `features.featurize`."""
        self.stats, self.rounds, self.seed = stats, rounds, seed
        self.featurizer = featurizer or (lambda points: featurize(points, stats))
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
        x = self.featurizer([p for p, _ in keep])
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
        return self._booster.predict(xgb.DMatrix(self.featurizer(points)))

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


class SpaceFeaturizer:
    """The program features of a space's points: each point's schedule is applied once (no
    build) and its vector remembered.  A point whose schedule does not apply gets NaNs (xgboost
    reads them as missing; the search checks validity before it measures)."""

    def __init__(self, space, stats, machine: Machine | None = None):
        self.space, self.stats = space, stats
        self.machine = machine or Machine.of(space.target)
        self._vectors: dict = {}

    def vector(self, point) -> list:
        if point not in self._vectors:
            try:
                self._vectors[point] = program_vector(self.space.scheduled(point).func, self.stats, self.machine)
            except ScheduleError:        # the point is not valid
                self._vectors[point] = [float("nan")] * FEATURES
        return self._vectors[point]

    def __call__(self, points) -> np.ndarray:
        return np.array([self.vector(p) for p in points], dtype=np.float32).reshape(-1, FEATURES)


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
