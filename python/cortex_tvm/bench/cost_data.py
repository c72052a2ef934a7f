"""Measurements for the shipped cost model: configurations of the derived schedule timed on
many (model, hidden size, CPU, batch size, trees) points, one JSON line each with the
features of its scheduled program (`tune.program_features`).

    python -m cortex_tvm.bench.cost_data --out runs.jsonl --models treelstm treefc \\
        --hidden 96 200 384 --mcpu native haswell --batch 4 16 40 --trees generated
    python -m cortex_tvm.tune.train_cost_model runs.jsonl --out tuning/cost_model.json
    python -m cortex_tvm.bench.cost_data --refeature old.jsonl --out new.jsonl   # features again

A group is "model/H/cpu/batch/trees": the CPU is the LLVM name of the code's target ("native"
is resolved to this host's, say znver3), the trees "sst" (the bundled dev trees, which the
benchmarks run on) or "generated" (`data.treebank_like`: treebank-shaped random trees, not the
benchmark's).  Each row carries the machine (lanes, registers, cores and this host's caches)
and the batch statistics its features were computed on, so `--refeature` recomputes features
after the extractor changes without timing anything again.  Rerunning with the same --out skips
what is already there.  AVX2 code (`--mcpu haswell`) runs on an AVX-512 host, so one machine
measures both ISAs.  A point 3x slower than its group's median is timed again and counts by the
median of its timings (`retime_outliers`): nothing is dropped as "disturbed".
"""
from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import os
import sys

import numpy as np

from .. import data
from ..schedule import ScheduleError
from ..target import Machine, host_model, make_target
from ..tune.features import WorkloadStats
from ..tune.measure import Measurer
from ..tune.pretrained import candidates
from ..tune.program_features import program_vector
from ..tune.space import Space, TuningPoint
from .cases import make_model, structures
from .common import alternate, batch_starts

#: generated trees per group source (batches are cut from them as from the SST file)
GENERATED_TREES = 400


def cpu_name(mcpu: str) -> str:
    """The LLVM CPU name of `--mcpu` ("native": this host's)."""
    return host_model() if mcpu == "native" else mcpu


def target_for(cpu: str, cores: int | None = None):
    """The target of code for `cpu`; with `cores`, its parallel loops split that many ways."""
    return make_target({"kind": "llvm", "mcpu": cpu, **({"num-cores": int(cores)} if cores else {})})


def source_trees(kind: str, vocab_size: int, seed: int = 0) -> list:
    """The trees a group's batches are cut from: "sst" or "generated"."""
    if kind == "sst":
        return data.sst_sample()[0]
    if kind == "generated":
        return data.treebank_like(GENERATED_TREES, seed=seed, vocab_size=vocab_size)
    raise ValueError(f"trees must be 'sst' or 'generated', got {kind!r}")


def group_batches(name: str, trees: list, batch_size: int) -> list:
    return [structures(name, trees[s:s + batch_size]) for s in batch_starts(len(trees), batch_size, 4)]


def collect(out, models, hidden, mcpus, batch_sizes=(1, 10, 64), points=8, repeats=5, seed=0,
            trees="sst", progress=sys.stderr, rounds=3):
    """Measure `points` configurations of every (model, H, CPU) at every batch size; one JSON
    line per measurement with its program features, appended to `out`.  A group's points are
    built first, then timed in turn, `rounds` rounds (`common.alternate`)."""
    done = set()
    if os.path.exists(out):
        with open(out, encoding="utf-8") as f:
            # keyed again from the knobs, so rows written before a knob was renamed still count
            rows = [json.loads(line) for line in f if line.strip()]
            done = {f"{row['group']}/{TuningPoint.from_json(row['knobs'])}" for row in rows}
    vocab_size = len(data.sst_sample()[1])
    source = source_trees(trees, vocab_size, seed)
    rng = np.random.default_rng(seed)
    for name, H, mcpu in itertools.product(models, hidden, mcpus):
        cpu = cpu_name(mcpu)
        target = target_for(cpu)
        model = make_model(name, H, vocab_size)
        space = Space(model, target)
        machine = Machine.of(target)
        # the default (held_out_report compares against it), the ranked candidates (the ranking
        # that matters), random points for coverage; timed in a random order, so that a point
        # is not always the first one after a build (a cold first timing would count against it)
        default = space.default()
        pool = [p for p in candidates(space.recipe) if p != default and space.is_valid(p)]
        chosen = [default] + [pool[i] for i in rng.permutation(len(pool))[:points // 2]]
        chosen += space.sample(points - len(chosen), rng, exclude=chosen)
        chosen = [chosen[i] for i in rng.permutation(len(chosen))]
        for B in batch_sizes:
            batches = group_batches(name, source, B)
            stats = WorkloadStats.of(space.padded_model, batches)   # padded sizes, as compile() sees them
            measurer = Measurer(model, batches, target, repeats=repeats, warmup=3)
            group = f"{name}/{model.hidden_size}/{cpu}/{B}/{trees}"   # the size that ran (MV-RNN: at most 64)
            todo = [p for p in chosen if f"{group}/{p}" not in done]
            built, results = {}, {}
            for point in todo:
                built[point], results[point] = measurer.build(space, point)
                if progress is not None and results[point].error:
                    print(f"cost_data: {group}/{point}: {results[point].error.splitlines()[0][:120]}",
                          file=progress, flush=True)
            # timed in turn, not one after another: one program built twice differed by 30% in
            # cost data timed point after point, and a tile that data ranked 10% faster was 10%
            # slower timed in turn (docs/tuning.md)
            seconds = alternate({p: c for p, c in built.items() if c is not None}, batches, rounds, repeats)
            for point in todo:
                seconds.setdefault(point, float("inf"))
                if progress is not None and np.isfinite(seconds[point]):
                    print(f"cost_data: {group}/{point}: {seconds[point] * 1e3:.3f} ms "
                          f"(built in {results[point].build_s:.1f} s)", file=progress, flush=True)
            # an outlier is re-timed by the same statistic it was first timed by
            settled = retime_outliers(seconds, lambda p: alternate({p: built[p]}, batches, 1, repeats)[p], progress)
            with open(out, "a", encoding="utf-8") as f:
                for point in todo:
                    seconds, timings = settled[point]
                    row = {"key": f"{group}/{point}", "group": group, "knobs": point.to_json(),
                           "default": point == default,
                           "seconds": seconds if np.isfinite(seconds) else None, "timings": timings,
                           "rounds": rounds, "error": results[point].error, "machine": dataclasses.asdict(machine),
                           "stats": dataclasses.asdict(stats),
                           "features": features_of(space, point, stats, machine)}
                    f.write(json.dumps(row) + "\n")


def features_of(space, point, stats, machine) -> list:
    """The program features of `point`'s scheduled kernel."""
    return program_vector(space.scheduled(point).func, stats, machine)


#: rows recorded before groups named their CPU and trees ("treelstm/64/native/1") were measured
#: on a 2-vCPU AMD EPYC Zen 4 (L1d 32 KB, L2 1 MB per core, L3 32 MB) with 2 threads, on the
#: SST dev trees
LEGACY_NATIVE, LEGACY_CACHES, LEGACY_CORES = "znver4", (32 * 1024, 1024 * 1024, 32 * 1024 * 1024), 2


#: knobs added to the space after cost data were first recorded -> the value the programs of
#: rows without them were built with
PREDATED_KNOBS = {"level_tails": False}


def refeature(rows, progress=sys.stderr) -> list:
    """The rows with their features computed again from their scheduled programs.

    Rows carry their machine and batch statistics.  Rows recorded before they did get the
    statistics of their group's batches (recomputed: the same trees and cuts), the legacy
    host's caches, and a group named as now ("treelstm/64/native/1" -> "treelstm/64/znver4/1/sst")."""
    vocab_size = len(data.sst_sample()[1])
    spaces, stats_of, out = {}, {}, []
    for i, row in enumerate(rows):
        parts = row["group"].split("/")
        if len(parts) == 4:
            parts = [*parts[:2], LEGACY_NATIVE if parts[2] == "native" else parts[2], parts[3], "sst"]
            group = "/".join(parts)
            row = {**row, "group": group, "key": f"{group}/{TuningPoint.from_json(row['knobs'])}"}
        name, H, cpu, B, trees = parts
        cores = row["machine"]["cores"] if "machine" in row else LEGACY_CORES
        key = (name, int(H), cpu, cores)
        if key not in spaces:
            spaces[key] = Space(make_model(name, int(H), vocab_size), target_for(cpu, cores))
        space = spaces[key]
        if "stats" in row:
            stats = WorkloadStats(**row["stats"])
        else:
            if (key, B, trees) not in stats_of:
                stats_of[(key, B, trees)] = WorkloadStats.of(
                    space.padded_model, group_batches(name, source_trees(trees, vocab_size), int(B)))
            stats = stats_of[(key, B, trees)]
        machine = Machine(**row["machine"]) if "machine" in row else Machine.of(space.target, LEGACY_CACHES)
        # rows timed before the knob existed ran padded levels; left out, the knob would take
        # its default (tails) and describe a program the row never timed
        point = TuningPoint.from_json({**PREDATED_KNOBS, **row["knobs"]})
        try:
            features = features_of(space, point, stats, machine)
        except ScheduleError:            # a point whose schedule no longer applies has none
            features = None
        out.append({**row, "machine": dataclasses.asdict(machine), "stats": dataclasses.asdict(stats),
                    "features": features})
        if progress is not None and (i + 1) % 25 == 0:
            print(f"cost_data: refeatured {i + 1}/{len(rows)}", file=progress, flush=True)
    return out


#: a point this many times its group's median is timed again: another job may have held the
#: cores (TVM's spinning thread pool then loses 10-30x), or the configuration is slow
OUTLIER = 3.0
RETIMES = 2


def retime_outliers(seconds: dict, measure, progress=None) -> dict:
    """point -> (seconds, timings).  A point slower than OUTLIER x the group's median is timed
    RETIMES more times and counts by the median of all its timings: a slow configuration
    repeats and is kept as slow; a disturbed measurement does not repeat.  Nothing is dropped."""
    finite = [t for t in seconds.values() if np.isfinite(t)]
    median = float(np.median(finite)) if finite else np.inf
    out = {}
    for point, first in seconds.items():
        timings = [first]
        if np.isfinite(first) and first > OUTLIER * median:
            timings += [measure(point) for _ in range(RETIMES)]
            if progress is not None:
                print(f"cost_data: re-timed an outlier ({first / median:.1f}x the median): "
                      + ", ".join(f"{t * 1e3:.3f}" for t in timings) + f" ms  [{point}]", file=progress, flush=True)
        finite_timings = [t for t in timings if np.isfinite(t)]
        out[point] = (float(np.median(finite_timings)) if finite_timings else np.inf,
                      [float(t) if np.isfinite(t) else None for t in timings])
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cortex_tvm.bench.cost_data", description=__doc__)
    parser.add_argument("--out", required=True)
    parser.add_argument("--models", nargs="+", default=["treelstm", "treefc"])
    parser.add_argument("--hidden", nargs="+", type=int, default=[64, 150, 256])
    parser.add_argument("--mcpu", nargs="+", default=["native", "haswell"])
    parser.add_argument("--batch", nargs="+", type=int, default=[1, 10, 64])
    parser.add_argument("--points", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3, help="rounds in which a group's points are timed in turn")
    parser.add_argument("--trees", choices=["sst", "generated"], default="sst",
                        help="the bundled SST dev trees, or treebank-shaped generated ones (default: sst)")
    parser.add_argument("--refeature", metavar="JSONL",
                        help="compute the features of these rows again (nothing is timed) and write them to --out")
    args = parser.parse_args(argv)
    if args.refeature:
        with open(args.refeature, encoding="utf-8") as f:
            rows = [json.loads(line) for line in f if line.strip()]
        with open(args.out, "w", encoding="utf-8") as f:
            for row in refeature(rows):
                f.write(json.dumps(row) + "\n")
        return 0
    collect(args.out, args.models, args.hidden, args.mcpu, args.batch, args.points, trees=args.trees,
            rounds=args.rounds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
