"""`MODULE:NAME` on the command line: a user's model object, or a function returning one.

Light on purpose (os and importlib only): `cli` re-exports `user_model`, and `cortex-tvm --help`
imports no TVM.
"""
from __future__ import annotations

import importlib
import importlib.util
import os

from . import UsageError

#: what a user model must have to be shown and tuned
MODEL_METHODS = ("compile", "lower", "reference")


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
    if not is_model(value) and callable(value):
        try:
            value = value()
        except Exception as err:    # the factory failed: one line naming it
            raise UsageError(f"{spec}: {attr}() raised {type(err).__name__}: {err}") from None
    if not is_model(value):
        raise UsageError(f"{spec}: {attr} is a {type(value).__name__}, not a model (an object with "
                         f"{', '.join(MODEL_METHODS)}, or a function returning one)")
    return value


def is_model(value) -> bool:
    """Whether `value` is a model instance: not a class, and has every method of MODEL_METHODS."""
    return not isinstance(value, type) and all(callable(getattr(value, m, None)) for m in MODEL_METHODS)
