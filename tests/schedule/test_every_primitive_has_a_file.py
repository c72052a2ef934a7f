"""Every public RecSchedule primitive (a method marked by @primitive, which sets `is_primitive` on
the method it returns: schedule/core.py) has a test file of its own, tests/schedule/test_<name>.py,
that calls it (docs/contributing.md, "A schedule primitive")."""
import ast
import os

import pytest

from cortex_tvm import schedule
from cortex_tvm.schedule import RecSchedule

HERE = os.path.dirname(__file__)


def marked() -> set:
    """The primitives as the class sees them (every family's, inherited)."""
    return {name for name in dir(RecSchedule) if getattr(getattr(RecSchedule, name), "is_primitive", False)}


def decorated() -> set:
    """The methods written under @primitive in python/cortex_tvm/schedule/*.py, read off the source."""
    folder = os.path.dirname(schedule.__file__)
    names = set()
    for file in sorted(os.listdir(folder)):
        if file.endswith(".py"):
            with open(os.path.join(folder, file), encoding="utf-8") as f:
                tree = ast.parse(f.read())
            names |= {node.name for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)
                      and any(isinstance(d, ast.Name) and d.id == "primitive" for d in node.decorator_list)}
    return names


def test_the_decorated_methods_are_the_marked_primitives():
    assert decorated() == marked()
    assert {"bind_nodes", "bind_packs", "single_kernel", "vectorize_reduction", "tile_gemm"} <= marked()


@pytest.mark.parametrize("name", sorted(decorated()))
def test_every_primitive_has_a_test_file_that_calls_it(name):
    path = os.path.join(HERE, f"test_{name}.py")
    assert os.path.isfile(path), f"no tests/schedule/test_{name}.py for the primitive {name}"
    with open(path, encoding="utf-8") as f:
        text = f.read()
    assert f".{name}(" in text, f"tests/schedule/test_{name}.py never calls {name}"
