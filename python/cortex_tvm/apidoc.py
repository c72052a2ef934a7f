"""The API reference, generated from the docstrings: ``python -m cortex_tvm.apidoc > docs/api.md``.

Each public name with its signature and the first paragraph of its docstring, grouped as a
user meets them; `tests/test_guide.py` checks that docs/api.md is what this prints now.
"""
from __future__ import annotations

import importlib.util
import inspect
import sys

import cortex_tvm as ct
from . import data, frontend, models, tune
from .runtime import CompiledModel
from .schedule import RecSchedule

HEADER = """# API reference

Generated from the docstrings by `python -m cortex_tvm.apidoc > docs/api.md` (a test checks
that it is current); `help(name)` shows a docstring whole. The user's guide is `docs/guide.md`.
"""


def first_paragraph(obj) -> str:
    doc = inspect.getdoc(obj) or "(no docstring)"
    return " ".join(doc.split("\n\n")[0].split())


def signature(obj) -> str:
    try:
        return str(inspect.signature(obj))
    except (TypeError, ValueError):       # a builtin or an object without one
        return ""


def entry(name: str, obj) -> str:
    return f"- **`{name}{signature(obj)}`**: {first_paragraph(obj)}"


def public_methods(cls) -> list:
    """(name, function) of the methods `cls` and its bases define, without a leading underscore."""
    return sorted((name, member) for name, member in inspect.getmembers(cls)
                  if not name.startswith("_") and (inspect.isfunction(member) or isinstance(member, property)))


def sections() -> list:
    """[(title, [(qualified name, object)])], in the order a user meets them."""
    top = [(f"ct.{name}", getattr(ct, name)) for name in sorted(ct.__all__)
           if callable(getattr(ct, name)) and not inspect.ismodule(getattr(ct, name))]
    zoo = [(f"ct.models.{cls.__name__}", cls) for cls in sorted(set(models.BY_NAME.values()), key=lambda c: c.__name__)]
    model_methods = [(f"Model.{name}", m) for name, m in public_methods(models.Model)]
    readers = [(f"ct.data.{name}", getattr(data, name)) for name in sorted(getattr(data, "__all__", dir(data)))
               if not name.startswith("_") and callable(getattr(data, name))
               and not inspect.ismodule(getattr(data, name))]
    compiled = [(f"CompiledModel.{name}", m) for name, m in public_methods(CompiledModel)]
    primitives = [(f"RecSchedule.{name}", m) for name, m in public_methods(RecSchedule)]
    tuning = [(f"tune.{name}", getattr(tune, name)) for name in sorted(tune.__all__)]
    traced = [(f"ct.frontend.{name}", getattr(frontend, name)) for name in sorted(frontend.__all__)
              if callable(getattr(frontend, name))]
    return [("The package (`import cortex_tvm as ct`)", top), ("Zoo models (`ct.models`)", zoo),
            ("What every model has (`ct.models.Model`)", model_methods),
            ("Trees and readers (`ct.data`)", readers), ("A compiled model (`CompiledModel`)", compiled),
            ("Recursive functions (`ct.frontend`)", traced),
            ("Schedule primitives (`ct.RecSchedule`)", primitives), ("Tuning (`cortex_tvm.tune`)", tuning)] + (
        [("Optimizers (`ct.optim`, with torch)", [("ct.optim.Adagrad", ct.optim.Adagrad)])]
        if importlib.util.find_spec("torch") else [])


def render() -> str:
    lines = [HEADER]
    for title, entries in sections():
        lines.append(f"## {title}\n")
        lines.extend(entry(name, obj) for name, obj in entries)
        lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.stdout.write(render())
