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
from . import data, linearize, models, ra
from .build import compile_count, make_target
from .runtime import load
from .data import Node, load_ptb
from .linearize import Linearized
from .runtime import CompiledModel
from .schedule import RecSchedule, ScheduleError
from . import recipes
from .version import __version__
from .frontend import compile, concat, exp, recursive, relu, sigmoid, split, tanh  # noqa: A004


__all__ = [
    "data", "linearize", "models", "ra", "Node", "load_ptb", "Linearized",
    "RecSchedule", "ScheduleError", "recipes", "CompiledModel", "compile_count", "make_target", "load", "__version__",
    # a model as a plain recursive Python function (cortex_tvm.frontend)
    "recursive", "compile", "sigmoid", "tanh", "relu", "exp", "split", "concat",
]
