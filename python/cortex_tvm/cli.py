"""The `cortex-tvm` command: demo, show, bench, tune."""
from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import sys
import time

from . import config
from .bench import MODELS
from .bench import add_parser as add_bench_parser

# The commands import the compiler when they run (in the functions below): building the parser,
# and so `cortex-tvm --help`, imports no TVM (3-5 s).


def _demo(args) -> int:
    import numpy as np

    import cortex_tvm as ct
    from .timing import batches_of, mean_of_best

    trees, vocab = ct.data.sst_sample() if args.trees is None else ct.data.load_ptb(args.trees)
    print(f"cortex-tvm demo: TreeLSTM H={args.hidden}, {len(trees)} SST trees, batches of {args.batch}, "
          f"TVM_NUM_THREADS={config.load().num_threads}")
    model = ct.models.TreeLSTM(hidden_size=args.hidden, vocab_size=len(vocab))
    start = time.perf_counter()
    compiled = model.compile(target="llvm")
    print(f"compiled in {time.perf_counter() - start:.1f} s (schedule {compiled.recipe_name!r}, "
          f"target {compiled.target})")

    batches = batches_of(trees, args.batch, args.max_batches)
    worst = 0.0
    for batch in batches:                       # correctness on every batch first
        worst = max(worst, float(np.abs(compiled(batch) - model.reference(batch)).max()))
    ours = mean_of_best(compiled, batches, args.repeats)
    baseline = mean_of_best(model.reference, batches, args.repeats)
    lin = mean_of_best(compiled.linearize, batches, args.repeats)
    # the work done at run time: hoisted leaves are table lookups, their FLOPs happened at compile time
    gflop = np.mean([model.runtime_flops(b, bool(compiled.plan.hoisted)) for b in batches]) / 1e9
    print(f"{len(batches)} batches, mean of per-batch best of {args.repeats}:")
    print(f"  cortex_tvm (end to end)      {ours * 1e3:8.3f} ms   {gflop / ours:6.1f} GFLOP/s of run-time work")
    print(f"  numpy, batched by level      {baseline * 1e3:8.3f} ms   -> cortex_tvm is {baseline / ours:.2f}x faster")
    print(f"  linearization share          {lin / ours * 100:8.1f} %    ({lin * 1e6:.0f} us per batch)")
    print(f"  max abs difference vs numpy  {worst:.2e}")
    return 0 if worst < 1e-3 else 1


class UsageError(Exception):
    """A bad command line: printed as one line, exit status 2."""


#: the zoo's default hidden size for each command (a user model has its own sizes)
DEFAULT_HIDDEN = {"show": 64, "tune": 256}
#: what a user model must have to be shown and tuned
MODEL_METHODS = ("compile", "lower", "reference")


def _make_model(name, hidden, vocab_size, command: str = "tune"):
    """A zoo model by name, or a user's model from `MODULE:NAME` (see `user_model`)."""
    if ":" in name:
        if hidden is not None:
            raise UsageError(f"--hidden applies to zoo models; {name} has its own sizes")
        return user_model(name)
    from .bench.cases import MODEL_CLASSES, make_model
    key = name.lower()
    if key not in MODEL_CLASSES:
        raise UsageError(f"unknown model {name!r}; models: {sorted(MODEL_CLASSES)}, or MODULE:NAME")
    return make_model(key, DEFAULT_HIDDEN[command] if hidden is None else hidden, vocab_size)


def user_model(spec: str):
    """The model `MODULE:NAME` names: MODULE a dotted module name or a .py file, NAME a model
    object in it (a zoo model, `ct.models.ProgramModel`, `ct.frontend.TracedModel` for a
    `@ct.recursive` cell, a `ct.models.Model` subclass's instance) or a function of no
    arguments that returns one."""
    module_name, _, attr = spec.rpartition(":")
    if not module_name or not attr:
        raise UsageError(f"{spec!r}: expected MODULE:NAME (a module or .py file, and a model in it)")
    try:
        if module_name.endswith(".py") or os.path.sep in module_name:
            if not os.path.isfile(module_name):
                raise UsageError(f"{spec}: no file {module_name}")
            loader = importlib.util.spec_from_file_location(
                os.path.splitext(os.path.basename(module_name))[0], module_name)
            module = importlib.util.module_from_spec(loader)
            loader.loader.exec_module(module)
        else:
            module = importlib.import_module(module_name)
    except UsageError:
        raise
    except Exception as err:        # the user's module failed to import: say so in one line
        raise UsageError(f"{spec}: cannot import {module_name}: {type(err).__name__}: {err}") from None
    if not hasattr(module, attr):
        raise UsageError(f"{spec}: {module_name} has no {attr!r}")
    value = getattr(module, attr)
    if not _is_model(value) and callable(value):
        try:
            value = value()
        except Exception as err:    # the factory failed: one line naming it
            raise UsageError(f"{spec}: {attr}() raised {type(err).__name__}: {err}") from None
    if not _is_model(value):
        raise UsageError(f"{spec}: {attr} is a {type(value).__name__}, not a model (an object with "
                         f"{', '.join(MODEL_METHODS)}, or a function returning one)")
    return value


def _is_model(value) -> bool:
    return not isinstance(value, type) and all(callable(getattr(value, m, None)) for m in MODEL_METHODS)


def _show(args) -> int:
    """Print the TIR before the recipe and after each of its steps (as a diff, or in full)."""
    import difflib

    from . import build, padding, recipes
    from .schedule import RecSchedule
    target = build.make_target(args.target)
    user = _make_model(args.model, args.hidden, args.vocab, "show")
    model = padding.padded_model(user, target)

    def fresh():
        return RecSchedule(model.lower(specialize_leaves=False))

    try:
        recipe = recipes.resolve(model, target, args.schedule)
    except (ValueError, TypeError, OSError) as err:     # an unknown name, a missing or corrupt file
        print(f"show: --schedule {args.schedule!r}: {err}", file=sys.stderr)
        return 2
    if recipe.knobs:
        recipe = recipe.fitted(fresh)
    if recipe.apply_fn is not None:        # a derived (function) schedule: show the steps it took
        steps = [step.as_json() for step in recipe.apply(fresh()).trace]
        recipe = recipes.Recipe(recipe.name, tuple(steps), knobs={k: [v] for k, v in recipe.knob_values().items()})
    rs = fresh()
    before = rs.script()
    print(f"# {type(model).__name__} H={getattr(user, 'hidden_size', None)} "
          f"(kernel H={getattr(model, 'hidden_size', None)}), schedule {recipe.name!r}, knobs {recipe.knob_values()}")
    print("# ---- lowered program (before any primitive)")
    print(before)
    for step in recipe.steps_with_knobs():
        done = len(rs.trace)
        recipes.Recipe("step", (step,)).apply(rs)
        label = ", ".join(f"{k}={v!r}" for k, v in step.get("args", {}).items())
        if len(rs.trace) == done:
            print(f"# ---- {step['primitive']}({label}): skipped (optional, does not apply)")
            continue
        after = rs.script()
        print(f"# ---- {step['primitive']}({label})")
        if args.full:
            print(after)
        else:
            diff = difflib.unified_diff(before.splitlines(), after.splitlines(), lineterm="", n=1)
            print("\n".join(list(diff)[2:]) or "# (no change to the TIR: a runtime/build setting)")
        before = after
    return 0


def _add_tune_parser(subparsers) -> None:
    p = subparsers.add_parser("tune", help="search a model's schedule knobs; trials go to a JSON-lines log")
    p.add_argument("model", help=f"a zoo model ({', '.join(MODELS)}) or MODULE:NAME, a model in a module "
                                 "or .py file (or a function returning one)")
    p.add_argument("--trials", type=int, default=32, help="trials in all (ones already in the log count)")
    p.add_argument("--log", default="tuning.jsonl", help="JSON-lines tuning log (appended to; resumed)")
    p.add_argument("--trees", default=None, help="a PTB-bracket file to time on (default: bundled SST sample)")
    p.add_argument("--hidden", type=int, default=None,
                   help=f"hidden size of a zoo model (default: {DEFAULT_HIDDEN['tune']})")
    p.add_argument("--vocab", type=int, default=None,
                   help="vocabulary size of a zoo model (default: the trees' vocabulary)")
    p.add_argument("--batch", type=int, default=10, help="trees per timed batch (default: %(default)s)")
    p.add_argument("--seconds", type=float, default=None, help="stop after this many seconds")
    p.add_argument("--target", default="llvm", help="TVM target kind (default: %(default)s, this CPU)")
    p.add_argument("--mcpu", default=None, help="LLVM CPU to tune for (e.g. haswell: AVX2 code)")
    p.add_argument("--repeats", type=int, default=5, help="timed runs per batch (the best counts)")
    p.add_argument("--seed", type=int, default=0, help="random seed of the search (default: %(default)s)")
    p.add_argument("--precision", choices=("fp32", "bf16"), default="fp32",
                   help="tune the bf16 build (compile(precision='bf16')); records are keyed by it")
    p.set_defaults(run=_tune)


def _tune(args) -> int:
    """`cortex-tvm tune MODEL --trials N --log PATH`: search the default schedule's knobs."""
    if args.trials < 1:
        print(f"tune: --trials must be at least 1, got {args.trials}", file=sys.stderr)
        return 2
    import cortex_tvm as ct
    from .tune import tune
    trees, vocab = ct.data.sst_sample() if args.trees is None else ct.data.load_ptb(args.trees)
    if args.vocab is not None and ":" in args.model:
        raise UsageError(f"--vocab applies to zoo models; {args.model} has its own sizes")
    if args.vocab is not None and args.vocab < 1:
        raise UsageError(f"--vocab must be at least 1, got {args.vocab}")
    model = _make_model(args.model, args.hidden, args.vocab or len(vocab))
    target = {"kind": "llvm", "mcpu": args.mcpu} if args.mcpu else args.target
    best = tune(model, trials=args.trials, log=args.log, trees=trees, batch_size=args.batch,
                target=target, seconds=args.seconds, seed=args.seed, repeats=args.repeats,
                precision=args.precision)
    if best is None:
        print("tune: every trial failed; see the errors in the log")
        return 1
    print(f"best: {best}")
    extra = "" if args.precision == "fp32" else f", precision={args.precision!r}"
    print(f"use it: model.compile(tuning_log={args.log!r}{extra})")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="cortex-tvm", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="compile TreeLSTM and run it on the bundled SST trees next to numpy")
    demo.add_argument("--hidden", type=int, default=256, help="hidden size (default: %(default)s)")
    demo.add_argument("--batch", type=int, default=10, help="trees per batch (default: %(default)s)")
    demo.add_argument("--max-batches", type=int, default=None, help="use only the first N batches")
    demo.add_argument("--repeats", type=int, default=5, help="timed runs per batch, the best counts (default: %(default)s)")
    demo.add_argument("--trees", default=None, help="a PTB-bracket file instead of the bundled SST sample")
    demo.set_defaults(run=_demo)
    show = sub.add_parser("show", help="print the TIR after each primitive of a schedule recipe")
    show.add_argument("model", help=f"a zoo model ({', '.join(MODELS)}) or MODULE:NAME, a model in a module "
                                    "or .py file (or a function returning one)")
    show.add_argument("--hidden", type=int, default=None,
                      help=f"hidden size of a zoo model (default: {DEFAULT_HIDDEN['show']})")
    show.add_argument("--vocab", type=int, default=100, help="vocabulary size (default: %(default)s)")
    show.add_argument("--schedule", default=None, help="recipe name or .json path (default: the model's)")
    show.add_argument("--target", default="llvm", help="TVM target: llvm or cuda (default: %(default)s)")
    show.add_argument("--full", action="store_true", help="print the whole TIR after each step, not a diff")
    show.set_defaults(run=_show)
    add_bench_parser(sub)
    _add_tune_parser(sub)
    args = parser.parse_args(argv)
    config.use_all_cores()
    try:
        return args.run(args)
    except UsageError as err:
        print(f"{args.command}: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
