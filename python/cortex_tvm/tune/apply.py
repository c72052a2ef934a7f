"""Use a tuning log: the best record for a workload (or the nearest one) as a recipe."""
from __future__ import annotations

import os
import warnings
from importlib import resources

from .database import Database, load_records
from .space import Space
from .workload import Workload

#: `tuning_log=SHIPPED` reads the logs installed with the package (cortex_tvm.tuning_data)
SHIPPED = "shipped"


def open_log(log) -> Database:
    """A Database from a path, a Database, or "shipped" (every log in cortex_tvm.tuning_data)."""
    if isinstance(log, Database):
        return log
    if log == SHIPPED:
        db = Database()
        for entry in sorted(resources.files("cortex_tvm.tuning_data").iterdir(), key=lambda e: e.name):
            if entry.name.endswith(".jsonl"):
                with resources.as_file(entry) as path:
                    db.records += load_records(path)
        return db
    if not os.path.exists(os.fspath(log)):
        raise FileNotFoundError(f"tuning log {log!r} does not exist")
    return Database(log)


def recipe_from_log(model, log, target="llvm", batch_size=None, schedule=None, precision="fp32"):
    """(recipe, how): the recipe with the log's best knobs for this model, how in
    {"exact", "nearest", "default"}; warns unless exact.

    The nearest record's knobs may not fit this model (a column tile that does
    not divide the hidden size): then the next records of that workload are
    tried, fastest first, and finally the default recipe.
    """
    return _best_recipe(Space(model, target, recipe=schedule, precision=precision), log, batch_size, 4)


def _best_recipe(space, log, batch_size, stacklevel):
    """`recipe_from_log` in `space` (the knobs of the recipe the log's records were made with);
    its warnings name the frame `stacklevel` up, the user's call."""
    workload = Workload.of(space.model, space.target, batch_size, space.precision)
    db = open_log(log)
    record, how = db.nearest(workload)
    if record is None:
        elsewhere = sorted({r.workload.target for r in db.records if r.workload.model == workload.model})
        if elsewhere:
            warnings.warn(f"the tuning records for {workload.model} in {log} were measured on "
                          f"{', '.join(elsewhere)}, not on this target ({workload.target}): not applied; "
                          f"using the default schedule {space.recipe.name!r}", stacklevel=stacklevel)
        else:
            warnings.warn(f"no tuning record for {workload.model} on {workload.target} in {log}; "
                          f"using the default recipe {space.recipe.name!r}", stacklevel=stacklevel)
        return space.recipe, "default"
    for candidate in db.top_k(record.workload, k=len(db.records)):
        point = candidate.point
        if space.contains(point) and space.is_valid(point):
            if candidate.recipe and candidate.recipe != space.fingerprint:
                warnings.warn(f"tuning record in {log} was made with recipe {candidate.recipe}, "
                              f"now {space.fingerprint}; its timing may no longer hold", stacklevel=stacklevel)
            if how != "exact":
                warnings.warn(f"no exact tuning record for {workload} in {log}; using the nearest, "
                              f"{candidate.workload} ({point})", stacklevel=stacklevel)
            return space.recipe_for(point), how
    warnings.warn(f"no record in {log} fits {workload} (nearest: {record.workload}); "
                  f"using the default recipe {space.recipe.name!r}", stacklevel=stacklevel)
    return space.recipe, "default"


def apply_best(model, log, target="llvm", batch_size=None, schedule=None, precision="fp32"):
    """Compile `model` with the best knobs the log has for it (see `recipe_from_log`)."""
    recipe, _ = recipe_from_log(model, log, target, batch_size, schedule, precision)
    return model.compile(target=target, schedule=recipe, precision=precision)


def resolve_recipe(model, log, facts, schedule, precision="fp32"):
    """The hook `compile_model(tuning_log=...)` calls: (recipe, from_log).  The log's recipe for
    this model and from_log True; or, when the log has nothing for them, the recipe `schedule`
    names, resolved as a compile without a log resolves it, and False.

    facts: the compile's `padding.ProgramFacts` of `model` (its target, padded model and GEMMs):
    the knob space is built on them, so nothing the compile found is found again and the
    recipe is resolved once."""
    recipe, how = _best_recipe(Space(model, facts.target, recipe=schedule, precision=precision, facts=facts),
                               log, None, 3)
    return recipe, how != "default"
