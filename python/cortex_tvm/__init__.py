"""cortex_tvm: a compiler for recursive deep-learning models, as an extension of Apache TVM.

    import cortex_tvm as ct
    trees, vocab = ct.data.load_ptb("trees.txt")
    model = ct.models.TreeLSTM(hidden_size=256, vocab_size=len(vocab))
    compiled = model.compile(target="llvm")
    roots = compiled(trees)            # numpy (len(trees), 256): root h

    @ct.recursive                      # or a new cell as a plain recursive function
    def cell(node, p): ...
    compiled = ct.compile(cell, weights={...}, max_children=2)

Pipeline, one module per stage: `ra` (recursive API) -> `lower` (TIR) ->
`schedule` (RecSchedule primitives) -> `build` -> `runtime`; `linearize`
turns trees into the kernel's index arrays.
"""
import importlib

# numpy only, imported now: trees and their layout
from . import data, linearize
from .data import Node, load_ptb
from .linearize import Linearized
from .version import __version__

#: imported on first use (PEP 562): the deploy side (TVM's runtime: `ct.load(path)` and a loaded
#: model), so that `import cortex_tvm` and `cortex-tvm --help` stay fast; and the compile side,
#: which a host that only loads exports never imports (lowering, schedules, the tuner, the front end)
_COMPILE_SIDE = {
    "CompiledModel": ("cortex_tvm.runtime", "CompiledModel"), "load": ("cortex_tvm.runtime", "load"),
    "models": ("cortex_tvm.models", None), "ra": ("cortex_tvm.ra", None), "recipes": ("cortex_tvm.recipes", None),
    "compile_count": ("cortex_tvm.compile_cache", "compile_count"), "make_target": ("cortex_tvm.build", "make_target"),
    "TIR_PIPELINE": ("cortex_tvm.tir_pipeline", "NAME"),
    "optim": ("cortex_tvm.optim", None),      # (imports torch: not in __all__, which `import *` imports)
    "RecSchedule": ("cortex_tvm.schedule", "RecSchedule"), "ScheduleError": ("cortex_tvm.schedule", "ScheduleError"),
    **{name: ("cortex_tvm.frontend", name)
       for name in ("compile", "concat", "exp", "recursive", "relu", "sigmoid", "split", "tanh")},
}


def __getattr__(name):
    if name not in _COMPILE_SIDE:
        raise AttributeError(f"module 'cortex_tvm' has no attribute {name!r}")
    module, attr = _COMPILE_SIDE[name]
    value = importlib.import_module(module)
    value = value if attr is None else getattr(value, attr)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_COMPILE_SIDE))


__all__ = [
    "data", "linearize", "models", "ra", "Node", "load_ptb", "Linearized",
    "RecSchedule", "ScheduleError", "recipes", "CompiledModel", "compile_count", "make_target", "load", "__version__",
    "TIR_PIPELINE",
    # a model as a plain recursive Python function (cortex_tvm.frontend)
    "recursive", "compile", "sigmoid", "tanh", "relu", "exp", "split", "concat",
]
