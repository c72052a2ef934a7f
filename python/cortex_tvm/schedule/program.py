"""Primitives that change what is computed where: leaf specialization, hoisting, batching."""
from __future__ import annotations

from dataclasses import replace

from .. import ra
from ..lower import lower
from ..target import bytes_of
from .core import ScheduleError, primitive


class ProgramPrimitives:

    def _only_program_steps_so_far(self, name):
        if self.scheduled:
            raise ScheduleError(f"{name} re-lowers the program, so it must come before {self.scheduled}")

    @primitive
    def specialize_leaves(self):
        """Give leaves their own loop nest (one large batch), with no is-leaf test in the level loop.

        Requires: applied before every other primitive except dynamic_batch.

        Examples
        --------
        Before (every level, leaves included, computes both cases)::

            for l in range(0, num_levels):            # "level"
                ... h_select[j, i] = T.if_then_else(num_children[level_offsets[l] + j] == 0,
                                                    leaf_h[j, i], internal_h[j, i])

        ``rs.specialize_leaves()``; after::

            with T.sblock("leaves"): ... h[level_offsets[0] + j, i] = leaf_h[...]
            for l in range(1, num_levels):            # "level": internal nodes only
                ... h[level_offsets[l] + j, i] = internal_h[...]
        """
        if self.lowered.specialized:
            raise ScheduleError("specialize_leaves: leaves are already specialized")
        self._only_program_steps_so_far("specialize_leaves")
        self._relower(lower(self.lowered.program, specialize_leaves=True))
        return self

    @primitive
    def hoist(self, budget_mb: float = 64.0):
        """Precompute every leaf state per word once; leaves become table lookups.

        A leaf's states depend only on its word, so CORTEX's computation
        hoisting computes them once per vocabulary entry and the inference
        reads `table[word[n]]`.  The tables are filled by the module's second
        function, `cortex_transform_params` (a parameter transform, as Relax's
        LiftTransformParams makes them), which holds the leaf computation over
        the vocabulary in a `tables` scope: it is scheduled by the same
        primitives (its blocks keep the leaf computes' names), built into the
        same module for the same target, and run once when the model is
        compiled or loaded.

        Requires: specialize_leaves() applied, the leaf case reads exactly one
        per-node input, and the tables (vocabulary x state sizes x their dtype's bytes) fit
        in `budget_mb`.

        Examples
        --------
        Before (``cortex_main``)::

            leaf_gates_sum[j, r] += W[r, e] * emb[word[level_offsets[0] + j], e]   # + epilogue blocks

        ``rs.hoist()``; after, ``cortex_main`` (tables h_table, c_table are parameters)::

            h[level_offsets[0] + j, i] = h_table[word[level_offsets[0] + j], i]
            c[level_offsets[0] + j, i] = c_table[word[level_offsets[0] + j], i]

        and ``cortex_transform_params(emb, W, bW, h_table, c_table)``::

            with T.sblock("tables"):
                for j, r, e in T.grid(V, 768, 256): leaf_gates_sum[j, r] += W[r, e] * emb[j, e]   # ...
                for j, i in T.grid(V, 256): h_table[j, i] = ...
        """
        if not self.lowered.specialized:
            raise ScheduleError("hoist: apply specialize_leaves() first")
        self._only_program_steps_so_far("hoist")
        if budget_mb <= 0:
            raise ScheduleError(f"hoist: budget_mb must be a positive number, got {budget_mb!r}")
        program = self.lowered.program
        if self.lowered.node_features:
            raise ScheduleError(f"hoist: the program reads per-node features "
                                f"({', '.join(f.name for f in self.lowered.node_features)}), which change "
                                "with every batch: no table can hold the leaves' states")
        inputs = [k for k in self.lowered.node_inputs]
        if len(inputs) != 1:
            raise ScheduleError(f"hoist: the leaf case must read exactly one per-node input, found "
                                f"{[i.name for i in inputs]}")
        word = inputs[0]
        size = sum(_numel(s.shape) * bytes_of(s.dtype) for s in program.states) * word.bound / 2**20
        if size > budget_mb:
            raise ScheduleError(f"hoist: tables need {size:.1f} MB, over the budget of {budget_mb} MB")
        n = ra.node()
        tables, leaf = {}, {}
        for state in program.states:
            table = ra.weight(f"{state.name}_table", (word.bound,) + state.shape, state.dtype)
            tables[state] = table
            # index(): clamped where the input may be missing, so a leaf slot holding the marker
            # reads a row of the table, never the row past it (run() refuses such a slot anyway)
            leaf[state] = ra.compute(state.shape, lambda *i, t=table: t[(word.index(n),) + i],
                                     name=f"{state.name}_leaf")
        hoisted = ra.RecProgram(program.spec, program.states, leaf, program.internal)
        self._relower(lower(hoisted, specialize_leaves=True, tables=(program, word, tables)))
        self.plan = replace(self.plan, hoisted=tuple((s.name, tables[s].name) for s in program.states))
        return self

    def possible_names(self) -> set:
        """Block and scratchpad names the program has now, plus those `hoist` would create
        (`<state>_leaf`): a recipe step naming anything else names a compute that does not exist."""
        states = {f"{s.name}_leaf" for s in self.lowered.program.states}
        return set(self.block_names()) | set(self.scratchpads()) | states

    @primitive
    def dynamic_batch(self, enabled: bool = True):
        """Batch all nodes of a level together (the default); `enabled=False`: one node per step.

        This is a linearization policy: the IR is the same loop over levels,
        but without batching every internal node is its own level, so the
        node loops run one node per step (what eager recursion does).
        """
        self.plan = replace(self.plan, dynamic_batching=enabled)
        return self

    def _relower(self, lowered):
        self.lowered = lowered
        self._reset(lowered.mod)


def _numel(shape):
    out = 1
    for d in shape:
        out *= int(d)
    return out
