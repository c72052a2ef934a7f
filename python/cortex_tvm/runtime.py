"""The executor: linearize trees, run the compiled kernel, gather the results."""
from __future__ import annotations

import threading

import numpy as np
import tvm

from . import linearize as _linearize
from .lower import FUNC_NAME


class _Workspace(threading.local):
    """Per-thread state buffers, grown to the largest batch seen and reused."""

    def __init__(self):
        self.states = None


class CompiledModel:
    """A compiled recursive model: `compiled(trees)` -> root states, numpy (B, *state shape).

    Weights are copied in at compile time.  Each thread gets its own state
    buffers, so one CompiledModel can be called from several threads at once.
    """

    def __init__(self, model, lowered, executable, target, recipe):
        self.model_name = type(model).__name__
        self.lowered, self.executable, self.target, self.recipe = lowered, executable, target, recipe
        self._func = executable[FUNC_NAME] if hasattr(executable, "__getitem__") else executable
        self._max_children = lowered.program.spec.max_children
        self._vocab_bound = model.vocab_bound
        self._states = lowered.program.states
        self._weights = [np.array(model.weights[w.name], order="C", copy=True) for w in lowered.weights]
        self._workspace = _Workspace()

    def linearize(self, trees) -> _linearize.Linearized:
        return _linearize.linearize(trees, self._max_children, pad=self.recipe.node_tile,
                                    vocab_size=self._vocab_bound)

    def _state_buffers(self, num_slots):
        ws = self._workspace
        if ws.states is None or ws.states[0].shape[0] < num_slots:
            capacity = max(1024, 1 << (num_slots - 1).bit_length())
            # zeros: slot 0 is the null node and is never written by the kernel
            ws.states = [np.zeros((capacity,) + s.shape, s.dtype) for s in self._states]
        return [s[:num_slots] for s in ws.states]

    def run(self, lin: _linearize.Linearized):
        """Run the kernel on linearized trees; returns (root states, per-slot state buffers)."""
        states = self._state_buffers(lin.num_slots)
        first = self._states[0]
        out = np.empty((len(lin.roots),) + first.shape, first.dtype)
        args = [lin.words for _ in self.lowered.node_inputs]
        args.append(lin.children)
        if self.lowered.uses_num_children:
            args.append(lin.num_children)
        args += [lin.level_offsets, lin.roots, int(lin.max_level_size)]
        args = [np.ascontiguousarray(a) if isinstance(a, np.ndarray) else a for a in args]
        self._func(*args, *self._weights, *states, out)
        return out, states

    def __call__(self, trees, all_nodes: bool = False):
        """Root state of each tree, (B, *state shape); with all_nodes=True, a list with each
        tree's per-node states in `cortex_tvm.data.postorder` order."""
        lin = self.linearize(trees)
        out, states = self.run(lin)
        if not all_nodes:
            return out
        rows = states[0][lin.node_slots]
        return np.split(rows, np.cumsum(lin.tree_sizes)[:-1])

    def inspect_source(self) -> str:
        mod = self.executable.mod
        return (mod.imports[0] if len(mod.imports) else mod).inspect_source()
