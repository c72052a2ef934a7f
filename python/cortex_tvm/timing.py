"""Wall-clock measurement shared by the demo, benchmarks and tuning."""
from __future__ import annotations

import gc
import time

import numpy as np


def best_of(fn, arg, repeats: int = 5) -> float:
    """Minimum wall time of `fn(arg)` over `repeats` runs, in seconds (GC off while timing)."""
    was_enabled = gc.isenabled()
    gc.collect()                # a collection the last build left pending would fall on one run
    gc.disable()
    try:
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            fn(arg)
            times.append(time.perf_counter() - start)
    finally:
        if was_enabled:
            gc.enable()
    return min(times)


def mean_of_best(fn, batches, repeats: int = 5, warmup: int = 1) -> float:
    """Mean over batches of each batch's best time: the figure DESIGN.md asks for."""
    for batch in batches[:warmup]:
        fn(batch)
    return float(np.mean([best_of(fn, b, repeats) for b in batches]))


def in_turn(fns: dict, batches, rounds: int, repeats: int = 5) -> dict:
    """label -> per-batch best times (seconds, an array over `batches`) of each callable in `fns`,
    best of `repeats` calls in each of `rounds` rounds, the callables taking turns round by round.

    These VMs drift up to 2x within minutes: timed in turn, a slow spell falls on every
    callable alike instead of on the one timed during it, so the figures compare.  Each
    callable's turn starts with an untimed call (the last one's data left the caches).
    """
    best = {label: np.full(len(batches), np.inf) for label in fns}
    for _ in range(rounds):
        for label, fn in fns.items():
            fn(batches[0])
            best[label] = np.minimum(best[label], [best_of(fn, b, repeats) for b in batches])
    return best


def batches_of(items, size: int, limit: int | None = None) -> list:
    """Consecutive batches of `size` (the last partial one dropped), at most `limit` of them."""
    out = [items[k:k + size] for k in range(0, len(items) - size + 1, size)]
    return out[:limit] if limit else out
