"""Does the shipped cost model pick well without measuring, and does a short tune find what a
long one finds?  A benchmark that prints, not a test:

    python -m cortex_tvm.bench.zero_shot --cases treelstm:160 treegru:320 --mcpu native haswell \\
        --batch 10 --trials 32 64 256 --out zero_shot/

For every case (model:hidden size, on every `--mcpu` and batch size; take sizes the shipped
cost model was not trained on, tuning/README.md lists its groups):
1. `tune.tune` runs once per `--trials` budget, each from an empty log of its own under --out
   (SST dev trees; the same batches are timed in step 3);
2. the analytic default (what `compile()` builds) and the shipped model's zero-shot pick (what
   `compile(schedule="ranked")` builds: schedules applied and ranked, nothing measured);
3. every distinct point is built once and all are timed alternately, `--rounds` rounds
   (`common.alternate`), so a slow spell of the VM falls on all of them.
One line per case, and a JSON line per case in --out/zero_shot.jsonl.  The tunes' own
figures are printed too; the table uses step 3's.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

from .. import config, data
from ..tune import tune
from ..tune.measure import tuning_batches
from ..tune.pretrained import choice
from ..tune.space import Space
from .cases import MODEL_CLASSES, make_model, structures
from .common import alternate, cpu_model
from .cost_data import cpu_name, target_for


def parse_case(text: str) -> tuple:
    name, sep, hidden = text.partition(":")
    if not sep or name not in MODEL_CLASSES or not hidden.isdigit():
        raise argparse.ArgumentTypeError(
            f"a case is model:hidden with a model of {sorted(MODEL_CLASSES)}, got {text!r}")
    return name, int(hidden)


def run_case(name, hidden, mcpu, batch_size, budgets, out_dir, rounds=5, repeats=5, progress=sys.stderr) -> dict:
    """The case's points, timed alternately: {"default", "pick", "tuned <trials>": (point, seconds)}."""
    trees, vocab = data.sst_sample()
    model = make_model(name, hidden, len(vocab))
    cpu = cpu_name(mcpu)
    target = target_for(cpu)
    structs = structures(name, trees)
    space = Space(model, target)
    points = {"default": space.default(),
              "pick": choice(space.recipe, space.padded_model, space.target) or space.default()}
    case = f"{name}-{hidden}-{cpu}-{batch_size}"
    for trials in budgets:
        log = os.path.join(out_dir, f"{case}-{trials}.jsonl")
        if os.path.exists(log):
            os.remove(log)      # from scratch: a resumed tune would count old trials
        points[f"tuned {trials}"] = tune(model, trials=trials, log=log, trees=structs,
                                         batch_size=batch_size, target=target, progress=progress)
    batches = tuning_batches(model, structs, batch_size)
    built = {}
    for point in points.values():
        if point is not None and point not in built:
            built[point] = model.compile(target=target, schedule=space.recipe_for(point))
    seconds = alternate(built, batches, rounds, repeats)
    return {label: (point, seconds.get(point)) for label, point in points.items()}


def line(case: str, result: dict) -> str:
    tuned = min((s for label, (_, s) in result.items() if label.startswith("tuned") and s), default=None)
    parts = [f"{label} {s * 1e3:.3f} ms" for label, (_, s) in result.items() if s]
    ratios = ""
    if tuned:
        ratios = "  (over the best tune: " + ", ".join(
            f"{label} {s / tuned:.3f}" for label, (_, s) in result.items() if s) + ")"
    return f"{case}: " + ", ".join(parts) + ratios


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cortex_tvm.bench.zero_shot", description=__doc__.split("\n")[0])
    parser.add_argument("--cases", nargs="+", type=parse_case, required=True, help="model:hidden ...")
    parser.add_argument("--mcpu", nargs="+", default=["native"], help="LLVM CPUs (native: this host's; haswell: AVX2)")
    parser.add_argument("--batch", nargs="+", type=int, default=[10])
    parser.add_argument("--trials", nargs="+", type=int, default=[64], help="one tune per budget")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", required=True, help="folder for the tuning logs and zero_shot.jsonl")
    args = parser.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    threads = config.load().num_threads
    print(f"zero_shot: {cpu_model()} ({cpu_name('native')}), TVM_NUM_THREADS={threads}", flush=True)
    for (name, hidden), mcpu, batch_size in ((c, m, b) for c in args.cases for m in args.mcpu for b in args.batch):
        result = run_case(name, hidden, mcpu, batch_size, args.trials, args.out, args.rounds, args.repeats)
        case = f"{name} H={hidden} {cpu_name(mcpu)} batch {batch_size}"
        print(line(case, result), flush=True)
        with open(os.path.join(args.out, "zero_shot.jsonl"), "a", encoding="utf-8") as f:
            f.write(json.dumps({"case": case, "threads": threads, "cpu": cpu_model(), **{
                label: {"knobs": None if p is None else p.to_json(), "seconds": s}
                for label, (p, s) in result.items()}}) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
