"""Adaptive dispatch: the best configuration for each batch-size regime, chosen per call.

Small batches have short, narrow levels and large ones wide levels, so the
best node tile, column tile or unroll depth differs between them.  An
`AdaptiveModel` compiles the log's best recipe for each regime (identical
recipes share one build through the compile cache) and runs each call on the
regime nearest (in log scale) to the batch's number of trees.
"""
from __future__ import annotations

import math
import warnings

from .apply import recipe_from_log


class AdaptiveModel:
    """`adaptive(trees)` runs the compiled model tuned for the nearest batch-size regime."""

    def __init__(self, model, log, regimes=(1, 10, 64), target="llvm"):
        if not regimes or any(not isinstance(b, int) or b < 1 for b in regimes):
            raise ValueError(f"regimes must be positive batch sizes, got {regimes!r}")
        self.regimes = sorted(set(regimes))
        self.compiled, self.recipes = {}, {}
        for batch_size in self.regimes:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                recipe, how = recipe_from_log(model, log, target, batch_size)
            self.recipes[batch_size] = (recipe.knob_values() if recipe.knobs else {}, how,
                                        [str(w.message) for w in caught])
            self.compiled[batch_size] = model.compile(target=target, schedule=recipe)

    def regime(self, trees) -> int:
        """The regime a batch runs in: nearest batch size on a log scale."""
        size = max(1, len(trees))
        return min(self.regimes, key=lambda b: abs(math.log(b) - math.log(size)))

    def __call__(self, trees, all_nodes: bool = False):
        return self.compiled[self.regime(trees)](trees, all_nodes=all_nodes)
