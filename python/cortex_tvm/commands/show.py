"""`cortex-tvm show`: the TIR before a schedule recipe and after each of its steps."""
from __future__ import annotations

import difflib
import sys

from .. import build, recipes
from ..policy import padding
from ..schedule import RecSchedule
from .model_arg import model_from_arg


def run(args) -> int:
    """Print the TIR before the recipe and after each of its steps (as a diff, or in full)."""
    target = build.make_target(args.target)
    user = model_from_arg(args.model, args.hidden, args.vocab, "show")
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
