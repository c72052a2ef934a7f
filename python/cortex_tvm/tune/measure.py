"""Build and time one tuning point; a failure measures as inf with its error, never raises."""
from __future__ import annotations

import time
import traceback
from dataclasses import dataclass, field, replace

import numpy as np

from .. import data
from ..node_features import seeded_batch, with_features
from ..recipes import ROOT_TOLERANCE
from ..timing import batches_of, best_of, in_turn

#: largest |compiled - model.reference| accepted on any batch (fast_math's polynomials are ~1e-6);
#: a bf16 build's is ROOT_TOLERANCE["bf16"]
TOLERANCE = ROOT_TOLERANCE["fp32"]


@dataclass(frozen=True)
class MeasureResult:
    """Per-batch best times in seconds (empty on failure), and the error text or None."""

    latencies: tuple = ()
    error: str | None = None
    build_s: float = 0.0
    #: the schedule that was built (CompiledModel.trace), for the tuning record
    trace: tuple = ()

    @property
    def mean(self) -> float:
        return float(np.mean(self.latencies)) if self.latencies and self.error is None else float("inf")


def invalid(space, point) -> MeasureResult:
    """The result of a point whose recipe does not apply (nothing is built)."""
    return MeasureResult(error=f"invalid: {space.check(point)}")


def tuning_batches(model, trees=None, batch_size: int = 10, max_batches: int = 16) -> list:
    """Representative batches: the user's trees, or the bundled SST sample, cut in `batch_size`s.

    With more trees than `max_batches` batches need, batches are spread over the whole set.
    A model that reads per-node features gets seeded rows with each batch (`seeded_batch`).
    """
    if trees is None:
        trees, _ = data.sst_sample()
    vocab = getattr(model, "vocab_size", None)
    if vocab is not None:       # the SST sample has words beyond a small model's vocabulary
        trees = [t for t in trees if all(n.word is None or n.word < vocab for n in data.postorder(t))]
    batches = batches_of(list(trees), batch_size)
    if not batches:
        raise ValueError(f"need at least {batch_size} trees (within the model's vocabulary) to tune")
    if len(batches) > max_batches:
        idx = np.linspace(0, len(batches) - 1, max_batches).round().astype(int)
        batches = [batches[i] for i in idx]
    read = model.lower(specialize_leaves=False).node_features
    if read:
        batches = [seeded_batch(b, read[0].size, seed=k) for k, b in enumerate(batches)]
    return batches


@dataclass
class Measurer:
    """Times compiled points on fixed batches: `warmup` untimed calls, then best of `repeats` per batch."""

    model: object
    batches: list
    target: object = "llvm"
    repeats: int = 5
    warmup: int = 2
    _expected: list = field(default_factory=list, repr=False)

    def expected(self, i: int = 0):
        """model.reference on batch i (every batch's computed once, on first use)."""
        if not self._expected:
            self._expected.extend(with_features(self.model.reference)(b) for b in self.batches)
        return self._expected[i]

    def wrong_numbers(self, i: int, got, precision: str = "fp32") -> str | None:
        """The error text when a compiled point's roots for batch i are not the reference's."""
        want = self.expected(i)
        got = np.asarray(got)[tuple(slice(0, d) for d in want.shape)]
        diff = float(np.abs(got - want).max())
        if diff <= ROOT_TOLERANCE[precision]:
            return None
        return f"wrong numbers on batch {i}: max |diff| vs model.reference = {diff:.3g}"

    def measure(self, space, point) -> MeasureResult:
        compiled, result = self.build(space, point)
        if compiled is None:
            return result
        try:
            return MeasureResult(self.time(compiled), None, result.build_s, result.trace)
        except Exception as err:        # a failed run is a data point, not a crash
            return MeasureResult(error=_last_line(err), build_s=result.build_s)

    def build(self, space, point):
        """(the compiled point, its MeasureResult without latencies), checked on every batch;
        (None, the failure) when it does not apply, build or compute the reference's numbers."""
        start = time.perf_counter()
        try:
            if space.check(point) is not None:
                return None, invalid(space, point)
            compiled = self.model.compile(target=self.target, schedule=space.recipe_for(point),
                                          precision=space.precision)
            build_s = time.perf_counter() - start
            # every batch, not only the first: a schedule can be wrong for some level sizes only
            for i, batch in enumerate(self.batches):
                wrong = self.wrong_numbers(i, with_features(compiled)(batch), compiled.precision)
                if wrong:
                    return None, MeasureResult(error=wrong, build_s=build_s)
            return compiled, MeasureResult((), None, build_s, tuple(compiled.trace))
        except Exception as err:        # a failed build or run is a data point, not a crash
            return None, MeasureResult(error=_last_line(err), build_s=time.perf_counter() - start)

    def retime(self, space, points, rounds: int) -> dict:
        """point -> MeasureResult: each point built once, then all timed in turn for `rounds`
        rounds (`timing.in_turn`); a point's latencies are each batch's best over the rounds.

        The points' figures compare with each other, not with trials timed minutes apart
        (these VMs drift up to 2x within minutes): the search settles its winner with them."""
        built, results = {}, {}
        for point in points:
            compiled, result = self.build(space, point)
            if compiled is None:
                results[point] = result
            else:
                built[point], results[point] = compiled, result
        runs = {point: with_features(compiled) for point, compiled in built.items()}
        for run in runs.values():
            for _ in range(self.warmup):
                run(self.batches[0])
        try:
            times = in_turn(runs, self.batches, rounds, self.repeats)
        except Exception as err:        # a failed run is a data point, not a crash
            return {**results, **{p: MeasureResult(error=_last_line(err)) for p in built}}
        for point, latencies in times.items():
            results[point] = replace(results[point], latencies=tuple(float(t) for t in latencies))
        return results

    def time(self, compiled) -> tuple:
        """Per-batch best of `repeats` after `warmup` calls; end-to-end per batch, like
        timing.mean_of_best: linearization included."""
        run = with_features(compiled)
        for _ in range(self.warmup):
            run(self.batches[0])
        return tuple(best_of(run, b, self.repeats) for b in self.batches)


def retime_by_measuring(measurer, space, points, rounds: int) -> dict:
    """`Measurer.retime` for a measurer that can only `measure` (build and time) a point:
    the points measured in turn, `rounds` times each; each batch's best over the rounds."""
    results = {point: [] for point in points}
    for _ in range(rounds):
        for point in points:
            results[point].append(measurer.measure(space, point))
    out = {}
    for point, runs in results.items():
        failed = next((r for r in runs if r.error is not None), None)
        out[point] = failed if failed is not None else replace(
            runs[-1], latencies=tuple(float(t) for t in np.min([r.latencies for r in runs], axis=0)))
    return out


def _last_line(err) -> str:
    return traceback.format_exception_only(type(err), err)[-1].strip()[:2000]
