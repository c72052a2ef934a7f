"""The search: the default point and random warm-up, then rounds guided by the cost model.

Each round retrains the cost model on every trial so far, scores a pool of
unmeasured points (validity is checked only for the top-scored ones, in
order, since checking costs a schedule application), and measures the best
few; a fraction `epsilon` of each round is random instead.  Budgets: a
number of trials (records already in the log for the workload count, so a
rerun resumes) and optionally seconds.
"""
from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass

import numpy as np

from .cost_model import CostModel
from .pretrained import choice, featurizer_for, shipped_booster
from .database import Database, TuningRecord, now, typical, versions
from .measure import retime_by_measuring
from .space import Space, TuningPoint


@dataclass(frozen=True)
class SearchConfig:
    trials: int = 32
    seconds: float | None = None
    warmup: int | None = None        # random trials before the model is used (default: trials // 4, >= 4)
    round_size: int = 4
    pool: int = 512
    program_pool: int = 48           # the pool when points are featurized from their programs
    epsilon: float = 0.2
    seed: int = 0
    confirm_top: int = 4             # re-timed in turn at the end, with the default point ...
    confirm_rounds: int = 2          # ... for this many rounds (0: no re-timing)

    def warmup_trials(self) -> int:
        return self.warmup if self.warmup is not None else max(4, self.trials // 4)


def search(space: Space, measurer, database: Database, workload, stats, config: SearchConfig,
           log=True) -> TuningRecord | None:
    """Tune; every trial is committed to `database`.  Returns the best record (None: all failed).

    `measurer.measure(space, point) -> MeasureResult`; `stats` are the
    WorkloadStats the cost model sees.  Progress goes to `log` (True: stderr; None: quiet).
    """
    log = sys.stderr if log is True else (log or None)
    rng = np.random.default_rng(config.seed)
    start = time.perf_counter()
    done = database.measured(workload)
    resumed_with = len(done)
    if done and log is not None:
        print(f"tune: resuming, {len(done)} trials of {workload} already in the log", file=log)
    featurizer = featurizer_for(space, stats)
    model = CostModel(stats, seed=config.seed, featurizer=featurizer,
                      prior=shipped_booster() if featurizer else None)
    # a program-featured point costs a schedule application to score: a smaller pool
    pool = min(config.pool, config.program_pool) if featurizer else config.pool
    target_detail = str(getattr(measurer, "target", ""))
    info = versions()

    def out_of_budget():
        return len(done) >= config.trials or (
            config.seconds is not None and time.perf_counter() - start >= config.seconds)

    cold = [True]             # the run's first trial pays for the process's first builds

    def run(point: TuningPoint):
        result = measurer.measure(space, point)
        record = TuningRecord(workload, point, result.latencies, result.error, now(), info, target_detail,
                              space.fingerprint, result.trace, warm=not cold[0])
        cold[0] = False
        database.commit(record)
        done[point] = record
        if log is not None:
            best = min(map(typical, database.measurements(workload).values()), default=math.inf)
            this = "failed: " + result.error.splitlines()[0][:80] if result.error else f"{record.mean * 1e3:.3f} ms"
            print(f"tune: trial {len(done)}/{config.trials}  {this}  best {best * 1e3:.3f} ms  "
                  f"elapsed {time.perf_counter() - start:.0f} s  [{point}]", file=log, flush=True)

    # the analytic default (what compile() builds without a log) and the shipped model's pick
    # (compile(schedule="ranked")) come first, so the tune's
    # winner is always measured against them (and re-timed with them in `confirm`)
    baselines = _baselines(space, featurizer is not None)
    first = baselines + space.sample(max(0, config.warmup_trials() - len(done) - len(baselines)), rng,
                                     exclude=done)
    for point in first:
        if out_of_budget():
            break
        if point not in done and space.contains(point) and space.is_valid(point):
            run(point)
    stalled = 0
    while not out_of_budget() and stalled < 3:
        measured = list(done)
        model.update(measured, [done[p].mean for p in measured])
        batch = propose(space, model, rng, exclude=set(done), count=config.round_size,
                        pool=pool, epsilon=config.epsilon)
        stalled = stalled + 1 if not batch else 0
        for point in batch:
            if out_of_budget():
                break
            run(point)
    if len(done) > resumed_with:         # nothing new measured (a finished run resumed): nothing to confirm
        confirm(space, measurer, database, workload, config, info, target_detail, log, baselines)
    best = database.best(workload)
    if log is not None and best is not None:
        print(summary(database, workload, best, space.default()), file=log, flush=True)
    return best


def summary(database, workload, best, default) -> str:
    """The tune's last line: the winner's time next to the default's, each the figure it ranks
    by (`Database.ranking`: the in-turn re-timing's where there is one), so a tune that found
    nothing better says so."""
    found = database.standing(workload, best.point)
    base = database.standing(workload, default)
    settled = database.in_turn(workload)
    how = " (timed in turn)" if best.point in settled else ""
    if best.point == default:
        return f"tune: the default is the fastest point measured: {found * 1e3:.3f} ms{how}  [{default}]"
    if not math.isfinite(base):
        return f"tune: best {found * 1e3:.3f} ms{how}  [{best.point}]; the default was not measured"
    both = " (both timed in turn)" if best.point in settled and default in settled else how
    return (f"tune: best {found * 1e3:.3f} ms  [{best.point}]; default {base * 1e3:.3f} ms, "
            f"{base / found:.2f}x the best{both}")


def _baselines(space, derived: bool) -> list:
    """The space's default point and, for the derived schedule, the shipped model's pick."""
    out = [space.default()]
    pick = choice(space.recipe, space.padded_model, space.target) if derived else None
    if pick is not None and pick not in out and space.contains(pick):
        out.append(pick)
    return out


def confirm(space, measurer, database, workload, config, info, target_detail, log, baselines=()):
    """Re-time the `config.confirm_top` fastest points and the `baselines` (the default and the
    shipped model's pick, `_baselines`) in turn, `config.confirm_rounds` rounds, and log one
    record per point: each batch's best over the rounds, marked `in_turn`.

    Trials are timed minutes apart and these VMs drift up to 2x within minutes, so a lucky
    trial could otherwise pick the winner; points timed side by side compare, and the
    database ranks the re-timed points by these records alone (`Database.top_k`).
    """
    if config.confirm_rounds < 1:
        return
    points = [r.point for r in database.top_k(workload, config.confirm_top, by_median=True)]
    for baseline in baselines:
        if baseline not in points and space.contains(baseline) and space.is_valid(baseline):
            points.append(baseline)
    if log is not None:
        among = " (the default among them)" if space.default() in points else ""
        print(f"tune: re-timing the {len(points)} leading points{among} in turn, "
              f"{config.confirm_rounds} rounds; the fastest of them in these rounds wins",
              file=log, flush=True)
    began = now()
    retime = getattr(measurer, "retime", None)
    results = (retime(space, points, config.confirm_rounds) if retime is not None
               else retime_by_measuring(measurer, space, points, config.confirm_rounds))
    for point in points:
        result = results[point]
        database.commit(TuningRecord(workload, point, result.latencies, result.error, now(), info,
                                     target_detail, space.fingerprint, result.trace, in_turn=began))
    if log is not None:
        for rank, (point, seconds) in enumerate(sorted(((p, results[p].mean) for p in points),
                                                       key=lambda pair: pair[1]), 1):
            this = f"{seconds * 1e3:.3f} ms" if math.isfinite(seconds) else "failed"
            print(f"tune: in turn, {rank} of {len(points)}: {this}  [{point}]", file=log, flush=True)


def propose(space: Space, model: CostModel, rng, exclude: set, count: int, pool: int, epsilon: float) -> list:
    """`count` valid unmeasured points: the top predicted of a random pool, a few random ones."""
    n_random = sum(rng.random() < epsilon for _ in range(count))
    candidates = space.sample(pool, rng, exclude=exclude, valid=False)
    scores = model.predict(candidates) + 1e-9 * rng.random(len(candidates))   # random tie-break
    chosen = []
    for i in np.argsort(-scores):
        if len(chosen) == count - n_random:
            break
        if space.is_valid(candidates[i]):
            chosen.append(candidates[i])
    chosen += space.sample(count - len(chosen), rng, exclude=exclude | set(chosen))
    return chosen
