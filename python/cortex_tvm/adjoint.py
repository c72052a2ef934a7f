"""Reverse-mode differentiation of RA programs: the backward pass, generated from the program.

The forward computes levels bottom-up; its adjoint runs them top-down.  Each stage
(`lower.build_stage`, read by `stage_numpy`) is first evaluated once more for all of its nodes
(recomputation: the forward keeps only the states, one row per node each, and with them known
no recursion is left); then, level by level from the roots down to the leaves, the adjoints
of the level's states flow backwards through the stage's blocks:

* an elementwise expression by the rules in `adjoint_numpy._Backprop.expr` (`+ - * /`, sigmoid, tanh, exp,
  min/max (relu), if_then_else); any other operation is refused by name;
* a reduction `sum_k a[..k..] * b[..k..]` as matrix products (`stage_numpy.contract`): the
  adjoint of `a` is the output adjoint contracted with `b` over the axes `a` does not have;
* a read scatters its adjoint back to where it read: a child's state row (each child has one
  parent in a tree: a plain add; a node shared in a DAG sums over its parents, in a fixed
  order, no atomics), an embedding row per word (rows summed per word, then added), a weight.

Weight reads that do not depend on the level (U[g*H+i, j*H+k]) accumulate their adjoint in the
read's own shape across all levels and are scattered into the weight's gradient once, at the
end: a level's contribution is one matrix product, (read axes) x (nodes of the level).

Given a target (`compile(training=True)` gives the model's), the levels and the sums of the
node-independent weight reads run compiled instead (`adjoint_pass.LevelPass`, generated from
the same stages and rules), after a compiled forward that keeps every tensor (`forward`), or
with their recomputation; the function also adds the embedding's rows into its gradient by
word, and numpy adds the compiled sums of the other weights into theirs.  Without a target, or for a stage
the emitter cannot take (`level_pass_note` says why), all of the above runs in numpy.

Example (TreeFC, 2 leaves and a root)::

    adjoint = Adjoint(model.program, model.linearize)
    grads = adjoint.vjp(lin, states, model.weights, d_states)     # {"emb": (V, H), "W": ..., "b": ...}
"""
from __future__ import annotations

import threading

import numpy as np

from . import lower as _lower
from . import ra
from .adjoint_emit import Unsupported
from .adjoint_pass import LevelPass
from .adjoint_numpy import NOT_WEIGHTS, RULES, WEIGHTS, Level, check_rules, scatter_invariant
from .blas_threads import single_threaded_blas
from .distinct_leaves import distinct_leaf_count, distinct_leaves_first
from .scratch import Recycled, held_rows, zero
from .stage_numpy import StageNumpy, loads


class Adjoint:
    """The backward pass of an RA program (see the module docstring).

    `linearize(trees)` lays trees out one node per slot, level by level (a model's
    `linearize`): level 0 holds the leaves, each later level internal nodes only.
    """

    def __init__(self, program: ra.RecProgram, linearize, target=None, bf16: bool = False):
        self.program, self.linearize = program, linearize
        self._layouts = {}              # id(load) -> how it reads its weight (`scatter_invariant`)
        self._held = threading.local()  # each thread's value and adjoint arrays (`_workspace`)
        self._gradients = Recycled()    # the gradients handed out, reused once let go
        try:
            lowered = {name: _lower.build_stage(program, name) for name in ("leaf", "internal")}
            self.stages = {name: StageNumpy(stage) for name, stage in lowered.items()}
            for stage in self.stages.values():
                for block in stage.blocks:
                    check_rules(block.body, block.name)
        except NotImplementedError as err:
            raise ValueError(f"no backward for this program: {err} (the rules: {RULES})") from None
        inputs = {k for s in self.stages.values() for k in s.placeholder_of.values() if isinstance(k, ra.NodeInput)}
        if len(inputs) > 1:
            raise ValueError(f"adjoint: the program reads {len(inputs)} per-node inputs; one (the word) is supported")
        #: the weights whose every read is a row picked by the node's word (an embedding table:
        #: `emb[word[n], i]`), whose gradient is zero outside the batch's words (`word_rows`)
        self.word_tables = word_tables(self.stages)
        self._leaf_words = all(word.missing is None for word in inputs)     # read at the leaves only
        #: the level pass compiled (`adjoint_pass.LevelPass`), or None: the numpy one runs;
        #: `level_pass_note` says why not
        self.level_pass, self.level_pass_note = None, "no target given"
        #: the per-node feature input the program reads (`ra.node_features`), or None: `vjp` also
        #: returns the gradient of the batch's features, one row per slot, under its name
        self.features = next((k for s in self.stages.values() for k in s.placeholder_of.values()
                              if isinstance(k, ra.NodeFeatures)), None)
        if target is not None:
            try:
                self.level_pass = LevelPass(lowered, self.stages, program, target, bf16=bf16)
                self.level_pass_note = None
            except Unsupported as err:
                self.level_pass_note = str(err)
        #: whether `lay_out` lists each word's first leaf before its repeats, which the compiled
        #: CPU pass then computes once: the leaf stage reads nothing of the node but its word
        self.distinct_leaves = (self.level_pass is not None and self.level_pass.device is None and
                                all(isinstance(k, (ra.Weight, ra.NodeInput)) for k in lowered["leaf"].placeholders))

    def layout(self, lin):
        """The layout `vjp` and `forward` take for the batch laid out as `lin` (one node per slot,
        `self.linearize`'s; `lay_out` makes it from the trees at once, as `CompiledModel.vjp`
        does): with `distinct_leaves`, each word's first leaf before the leaves that repeat it
        (`distinct_leaves.distinct_leaves_first`), which copy its states in the forward and add
        their adjoints into its own in the backward; else `lin` itself."""
        return distinct_leaves_first(lin) if self.distinct_leaves else lin

    def lay_out(self, trees, features=None, arrays=None):
        """The layout `vjp` and `forward` take for the batch `trees` (or for the forest `arrays`,
        a callable laying it out given distinct_leaves=, `Signature.layout_parents`): one node
        per slot, with `distinct_leaves` each word's first leaf before the leaves that repeat
        it, made so at once (`linearize.lay_out_levels`); `layout(self.linearize(trees))`, cheaper."""
        if arrays is not None:
            return arrays(distinct_leaves=self.distinct_leaves)
        return self.linearize(trees, features=features, distinct_leaves=self.distinct_leaves)

    def word_rows(self, lin) -> dict:
        """{word table's name: the rows its gradient can be nonzero on for the batch `lin`}: the
        words its nodes read, sorted, once each: the leaves' where only leaves read one, else every
        node's (a node without a word reads the clamped last row)."""
        distinct = lin.leaf_words if self._leaf_words else None     # (the layout's, where it found them)
        if not self._leaf_words:
            words = lin.words[lin.node_slots]
        elif distinct is None:           # internal nodes hold 0 there, and read no row
            words = lin.words[int(lin.level_offsets[0]):int(lin.level_offsets[1])]
        rows = {}
        for name, shape in self.word_tables.items():
            if distinct is not None and (not len(distinct) or distinct[-1] < shape[0]):
                rows[name] = distinct.astype(np.int64)        # (sorted, once each, inside the table)
            else:
                rows[name] = np.unique(np.minimum(words if distinct is None else distinct,
                                                  shape[0] - 1)).astype(np.int64)
        return rows

    def _workspace(self, stage: str) -> dict:
        """This thread's arrays for `stage` (`Level.allocate`)."""
        held = self._held.__dict__.setdefault("stages", {})
        return held.setdefault(stage, {})

    def forward(self, lin, weights: dict):
        """The training forward in the compiled pass (None without one, or where the batch's
        levels are too small for it: `LevelPass.forward_pays`): every state's rows,
        (num_slots, *shape) float32 each (slot 0, the null node, zeros), computed level by level
        from the leaves with every block's value kept for the backward, and a token that
        `vjp(..., forwarded=token)` hands back to use those values instead of recomputing them
        (until this thread's next `forward` overwrites them)."""
        if self.level_pass is None or not self.level_pass.forward_pays(lin):
            return None
        # (not np.zeros: the pass writes every state row a stage makes, the repeated leaves' by copy;
        # zeroed: the null node's row, and a state's rows where the stage does not write it in place,
        # which covers one it does not make at all: the child-sum TreeLSTM's leaves' c)
        states = [np.empty((lin.num_slots,) + s.shape, np.float32) for s in self.program.states]
        ranges = _stage_ranges(lin)
        for index, rows in enumerate(states):
            rows[0] = 0
            for name, (start, end) in ranges.items():
                if index not in self.level_pass.state_values[name].values():
                    rows[start:end] = 0
        self.level_pass(lin, states, weights, None, self._levels(lin, states, weights, None, True), part="forward")
        token = self._held.__dict__["forwarded"] = object()
        return states, token

    def _levels(self, lin, states, weights, d_states, states_as_values: bool) -> dict:
        """{stage: Level over all of its nodes} with this thread's value and adjoint arrays for
        the compiled pass, as the last call left them (its levels zero their own adjoint rows);
        states_as_values: the values of the blocks that make a state are the state's rows of
        `states` (the "forward" and "backward" parts), not arrays of their own ("all")."""
        whole = {}
        for name, (start, end) in _stage_ranges(lin).items():
            if end > start:
                in_states = {key: states[index][start:end]
                             for key, index in self.level_pass.state_values[name].items()} if states_as_values else {}
                whole[name] = Level(self.stages[name], lin, states, weights, d_states, start, end - start)
                whole[name].allocate(self.level_pass.row_shapes(name), self._workspace(name),
                                     self.level_pass.transient.get(name, ()), in_states)
        return whole

    def vjp(self, lin, states: list, weights: dict, d_states: list, forwarded=None, scratch=False,
            word_rows=None) -> dict:
        """Gradients of sum(d_states * states) with respect to every weight the program reads
        (and, for a program that reads per-node features, to lin.features: (num_slots, F) rows
        under the feature input's name).

        lin: from `self.linearize`; states: each state's (num_slots, *shape) float32 rows, as
        the forward computed them; d_states: the loss's adjoint of each state's rows (slot 0,
        the null node, is ignored).  Returns {weight name: gradient, the weight's shape}.

        Two passes per stage.  The first runs the levels from the roots down: the adjoints of
        each level's tensors, and through them of its children's states; the weights wait.
        The second runs once over all the stage's nodes: each weight's gradient from the
        tensors' adjoints, as matrix products over every node at once.

        forwarded: the token of the `forward` that computed `states` on this thread; while no
        later `forward` has overwritten its values, the compiled pass skips recomputing them.
        scratch: d_states are float32 arrays the caller gives up (`state_adjoints`), which the
        pass adds the children's adjoints into, instead of into copies.

        A gradient returned is reused by a later call on this thread once the caller has let
        go of it (`scratch.Recycled`): fresh gradient arrays page-fault at their first write.

        word_rows: {word table: rows} (`self.word_rows(lin)`): those tables' gradients come back
        as the rows listed only, (len(rows), *row shape); the table-sized array the pass added
        into is zeroed again on them and kept, so that the next call need not clear megabytes.
        """
        with single_threaded_blas():
            grads = self._vjp(lin, states, weights, d_states, forwarded, scratch)
        for name, rows in (word_rows or {}).items():
            table = grads.get(name)
            if table is None:                    # no read of it in this batch's stages
                grads[name] = np.zeros((len(rows),) + self.word_tables[name][1:], np.float32)
                continue
            grads[name] = table[rows]
            table[rows] = 0
            del table
            self._gradients.zeroed(name)
        return grads

    def state_adjoints(self, num_slots: int) -> list:
        """Zeroed (num_slots, *shape) float32 arrays, one per state: this thread's scratch for
        `vjp(..., scratch=True)`, overwritten by the next call on the thread."""
        held = self._held.__dict__.setdefault("state_adjoints", {})
        arrays = [held_rows(held, s, num_slots, s.shape) for s in self.program.states]
        for array in arrays:
            zero(array)
        return arrays

    def _vjp(self, lin, states, weights, d_states, forwarded=None, scratch=False):
        if not scratch:                          # the pass adds into them
            d_states = [np.array(d, np.float32) for d in d_states]
        grads, deferred = _Gradients(self._gradients), {}
        if self.features is not None:            # a state-like sink: each node's own row
            grads[self.features.name] = np.zeros(lin.features.shape, np.float32)
        offsets, ranges = lin.level_offsets, _stage_ranges(lin)
        whole = {}
        if self.level_pass is None:
            if lin.leaf_sources is not None:
                raise ValueError("the numpy backward runs every leaf: a layout with repeated leaves "
                                 "(Adjoint.lay_out) is for the compiled pass")
            for name, (start, end) in ranges.items():
                if end > start:
                    whole[name] = Level(self.stages[name], lin, states, weights, d_states, start, end - start)
                    whole[name].recompute()
                    if self.features is not None:
                        whole[name].grads_of_features = grads[self.features.name]
        else:                                                 # the compiled pass has or makes the values
            kept = forwarded is not None and self._held.__dict__.get("forwarded") is forwarded
            if not kept:                          # the recomputation overwrites the last forward's values
                self._held.__dict__["forwarded"] = None
            whole = self._levels(lin, states, weights, d_states, kept)
        skip = {}
        if self.level_pass is not None:                       # first pass: the levels, top down
            reads = self.level_pass(lin, states, weights, d_states, whole, part="backward" if kept else "all",
                                    gradient=grads.of, overwritten=grads.overwritten,
                                    d_features=None if self.features is None else grads[self.features.name])
            for weight, index, sums, layout_key in reads:
                scatter_invariant(grads.of(weight), index, sums, self._layouts.setdefault(layout_key, [None]))
            skip = self.level_pass.weight_blocks
        else:
            for level in range(lin.num_levels - 1, -1, -1):
                start, end = int(offsets[level]), int(offsets[level + 1])
                if end > start:
                    whole["leaf" if level == 0 else "internal"].part(start, end).backward(NOT_WEIGHTS)
        for name, level in whole.items():                     # second pass: the weights
            level.backward(WEIGHTS, grads, deferred, skip.get(name, ()))
        for load, key, adj, idx in deferred.values():
            grad = grads.of(key)
            scatter_invariant(grad, idx, adj, self._layouts.setdefault(id(load), [None]))
        return grads


class _Gradients(dict):
    """{weight name: gradient}, each made (zeros, from `pool`) when first asked for (`of`)."""

    def __init__(self, pool: Recycled):
        super().__init__()
        self.pool = pool

    def of(self, weight: ra.Weight) -> np.ndarray:
        grad = self.get(weight.name)
        if grad is None:
            grad = self[weight.name] = self.pool.zeros(weight.name, weight.shape)
        return grad

    def overwritten(self, weight: ra.Weight):
        """The gradient array of `weight`, not zeroed, for a compiled sum that writes all of it
        (`LevelPass`'s sums in place); None where the weight already has one, which holds a sum."""
        if weight.name in self:
            return None
        grad = self[weight.name] = self.pool.empty(weight.name, weight.shape)
        return grad


def word_tables(stages: dict) -> dict:
    """{weight name: its shape} for the weights every read of which, in every stage, picks
    its row by a per-node input (`ra.NodeInput`, the word): `emb[word[n], i]`."""
    found, other = {}, set()
    for stage in stages.values():
        inputs = {key for key, obj in stage.placeholder_of.items() if isinstance(obj, ra.NodeInput)}
        for block in stage.blocks:
            for load in loads(block.body):
                weight = stage.placeholder_of.get(load.source)
                if not isinstance(weight, ra.Weight):
                    continue
                if load.args and _reads_row_by(load.args[0], inputs):
                    found[weight.name] = tuple(int(d) for d in weight.shape)
                else:
                    other.add(weight.name)
    return {name: rows for name, rows in found.items() if name not in other}


def _reads_row_by(index, inputs) -> bool:
    """Whether a read's first index is a per-node input's value, as is or clamped
    (`NodeInput.index`: min(word[n], bound - 1))."""
    if index.kind == "Min":
        return (any(_reads_row_by(a, inputs) for a in index.args)
                and all(a.kind in ("load", "const") for a in index.args))
    return index.kind == "load" and index.source in inputs


def _stage_ranges(lin) -> dict:
    """{stage: (first node, end)}: the leaves are level 0 (those a pass computes: each word's
    first, where the layout lists repeats after them), the internal nodes every later level."""
    offsets = lin.level_offsets
    return {"leaf": (int(offsets[0]), int(offsets[0]) + distinct_leaf_count(lin)),
            "internal": (int(offsets[1]), int(offsets[-1]))}
