"""The numpy executor of a traced cell: the same trace evaluated level by level.

It reads the traced expression graph directly (never the RA program), so
`TracedModel.reference` checks the RA conversion, the lowering and the
schedules, the way each zoo model's hand-written `numpy_forward` does.
"""
from __future__ import annotations

import numpy as np

from ..models.numpy_cells import sigmoid
from .tensor import Tensor

_UNARY = {"sigmoid": sigmoid, "tanh": np.tanh, "exp": np.exp, "relu": lambda v: np.maximum(v, 0),
          "neg": np.negative}
_BINARY = {"+": np.add, "-": np.subtract, "*": np.multiply, "/": np.divide}


def numpy_forward(trace, weights: dict, lin, no_word=None) -> list:
    """All states of all slots, (num_slots, *state shape) each, float32 (slot 0: the null node).

    no_word: the marker the linearizer stores at a node without a word (the embedding reads
    zeros there), or None when only leaves read words."""
    states = [np.zeros((lin.num_slots,) + shape, np.float32) for shape in trace.state_shapes]
    lo = lin.level_offsets
    levels = [(trace.leaf, lo[0], lo[1])] + [(trace.inner, a, b) for a, b in zip(lo[1:-1], lo[2:])]
    for case, start, end in levels:
        values = _Level(weights, lin, states, start, end, no_word).states(case)
        for state, value in zip(states, values):
            state[start:end] = value
    return states


class _Level:
    """Evaluates one case for the nodes [start, end) of one level, each tensor once."""

    def __init__(self, weights, lin, states, start, end, no_word):
        self.w, self.lin, self.all_states, self.no_word = weights, lin, states, no_word
        self.rows = slice(start, end)
        self.count = end - start
        self.memo = {}

    def states(self, case):
        return [self.value(t) for t in case.states]

    def value(self, t):
        if isinstance(t, float):
            return np.float32(t)
        if id(t) not in self.memo:
            self.memo[id(t)] = self._evaluate(t)
        return self.memo[id(t)]

    def _evaluate(self, t: Tensor):
        op = t.op
        if op == "weight":
            return self.w[t.attrs["name"]]
        if op == "embed":
            words = self.lin.words[self.rows]
            if self.no_word is None:
                return self.w[t.attrs["name"]][words]
            present = words != self.no_word
            return self.w[t.attrs["name"]][np.where(present, words, 0)] * present[:, None]
        if op == "features":
            return self.lin.features[self.rows]
        if op == "child":
            return self.all_states[t.attrs["state"]][self.lin.children[self.rows, t.attrs["j"]]]
        if op == "unary":
            return _UNARY[t.attrs["fn"]](self.value(t.args[0]))
        if op == "binary":
            return _BINARY[t.attrs["fn"]](*(self.value(a) for a in t.args))
        if op == "matvec":
            W, x = t.args
            return self.value(x) @ self.w[W.attrs["name"]].T
        if op == "piece":
            q, m = t.attrs["index"], t.size
            return self.value(t.args[0])[..., q * m:(q + 1) * m]
        if op == "concat":
            parts = [self.value(p) for p in t.args]
            if all(p.ndim == 1 for p in parts):       # only weights: one vector for every node
                return np.concatenate(parts)
            return np.concatenate([np.broadcast_to(p, (self.count, p.shape[-1])) for p in parts], axis=1)
        raise AssertionError(f"unknown traced op {op!r}")
