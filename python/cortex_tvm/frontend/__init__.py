"""Recursive models written as plain Python functions, traced into the recursive API.

    @ct.recursive
    def tree_fc(node, p):
        if node.is_leaf:
            return p.emb[node.word]
        left, right = tree_fc(node.children[0], p), tree_fc(node.children[1], p)
        return ct.tanh(p.W @ (left + right) + p.b)

    compiled = ct.compile(tree_fc, weights={"emb": ..., "W": ..., "b": ...}, max_children=2)

`trace` runs the function on symbolic nodes and tensors (`tensor`, `ops`),
`to_ra` turns the trace into an `ra.RecProgram` (`ra_text` prints one),
`numpy_levels` evaluates the trace with numpy, and `model` wraps it as a
`models.Model` and compiles it.
"""
from ..compiler import with_unroll_depth
from .model import TracedModel, compile  # noqa: A004
from .ops import concat, exp, relu, sigmoid, split, tanh
from .show import ra_text
from .trace import Recursive, recursive

__all__ = ["recursive", "compile", "TracedModel", "Recursive", "sigmoid", "tanh", "relu", "exp",
           "split", "concat", "with_unroll_depth", "ra_text"]
