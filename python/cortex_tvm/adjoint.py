"""Reverse-mode differentiation of RA programs: the backward pass, generated from the program.

The forward computes levels bottom-up; its adjoint runs them top-down.  Each stage
(`lower.build_stage`, read by `stage_numpy`) is first evaluated once more for all of its nodes
(recomputation: the forward keeps only the states, one row per node each, and with them known
no recursion is left); then, level by level from the roots down to the leaves, the adjoints
of the level's states flow backwards through the stage's blocks:

* an elementwise expression by the rules in `_Backprop.expr` (`+ - * /`, sigmoid, tanh, exp,
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
node-independent weight reads run compiled instead (`adjoint_kernel.LevelPass`, generated from
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
from .adjoint_kernel import LevelPass
from .linearize import NULL_SLOT
from .blas_threads import single_threaded_blas
from .named_axes import contract, elementwise, expand, reduce_to, times_missing
from .scratch import Recycled, held_rows, zero
from .stage_numpy import StageNumpy, basic_index, factors

#: what the backward differentiates, for error messages
RULES = "+ - * /, min, max (relu), sigmoid, tanh, exp, if_then_else, sums"
#: the TIR calls with a derivative rule (d/dx of f in terms of y = f(x))
_CALL_RULES = {"tirx.sigmoid": lambda y: y * (1.0 - y), "tirx.tanh": lambda y: 1.0 - y * y,
               "tirx.exp": lambda y: y}


class Adjoint:
    """The backward pass of an RA program (see the module docstring).

    `linearize(trees)` lays trees out one node per slot, level by level (a model's
    `linearize`): level 0 holds the leaves, each later level internal nodes only.
    """

    def __init__(self, program: ra.RecProgram, linearize, target=None):
        self.program, self.linearize = program, linearize
        self._layouts = {}              # id(load) -> how it reads its weight (`_scatter_invariant`)
        self._held = threading.local()  # each thread's value and adjoint arrays (`_workspace`)
        self._gradients = Recycled()    # the gradients handed out, reused once let go
        try:
            lowered = {name: _lower.build_stage(program, name) for name in ("leaf", "internal")}
            self.stages = {name: StageNumpy(stage) for name, stage in lowered.items()}
            for stage in self.stages.values():
                for block in stage.blocks:
                    _check_rules(block.body, block.name)
        except NotImplementedError as err:
            raise ValueError(f"no backward for this program: {err} (the rules: {RULES})") from None
        inputs = {k for s in self.stages.values() for k in s.placeholder_of.values() if isinstance(k, ra.NodeInput)}
        if len(inputs) > 1:
            raise ValueError(f"adjoint: the program reads {len(inputs)} per-node inputs; one (the word) is supported")
        #: the level pass compiled (`adjoint_kernel.LevelPass`), or None: the numpy one runs;
        #: `level_pass_note` says why not
        self.level_pass, self.level_pass_note = None, "no target given"
        #: the per-node feature input the program reads (`ra.node_features`), or None: `vjp` also
        #: returns the gradient of the batch's features, one row per slot, under its name
        self.features = next((k for s in self.stages.values() for k in s.placeholder_of.values()
                              if isinstance(k, ra.NodeFeatures)), None)
        if self.features is not None:
            self.level_pass_note = "the compiled level pass does not read per-node features; the numpy one runs"
        elif target is not None:
            try:
                self.level_pass = LevelPass(lowered, self.stages, program, target)
                self.level_pass_note = None
            except Unsupported as err:
                self.level_pass_note = str(err)

    def _workspace(self, stage: str) -> dict:
        """This thread's arrays for `stage` (`_Level.allocate`)."""
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
        states = [np.zeros((lin.num_slots,) + s.shape, np.float32) for s in self.program.states]
        self.level_pass(lin, states, weights, None, self._levels(lin, states, weights, None, True), part="forward")
        token = self._held.__dict__["forwarded"] = object()
        return states, token

    def _levels(self, lin, states, weights, d_states, states_as_values: bool) -> dict:
        """{stage: _Level over all of its nodes} with this thread's value and adjoint arrays for
        the compiled pass, as the last call left them (its levels zero their own adjoint rows);
        states_as_values: the values of the blocks that make a state are the state's rows of
        `states` (the "forward" and "backward" parts), not arrays of their own ("all")."""
        whole = {}
        for name, (start, end) in _stage_ranges(lin).items():
            if end > start:
                in_states = {key: states[index][start:end]
                             for key, index in self.level_pass.state_values[name].items()} if states_as_values else {}
                whole[name] = _Level(self.stages[name], lin, states, weights, d_states, start, end - start)
                whole[name].allocate(self.level_pass.row_shapes(name), self._workspace(name),
                                     self.level_pass.transient.get(name, ()), in_states)
        return whole

    def vjp(self, lin, states: list, weights: dict, d_states: list, forwarded=None, scratch=False) -> dict:
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
        """
        with single_threaded_blas():
            return self._vjp(lin, states, weights, d_states, forwarded, scratch)

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
            for name, (start, end) in ranges.items():
                if end > start:
                    whole[name] = _Level(self.stages[name], lin, states, weights, d_states, start, end - start)
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
                                    gradient=grads.of)
            for weight, index, sums, layout_key in reads:
                _scatter_invariant(grads.of(weight), index, sums, self._layouts.setdefault(layout_key, [None]))
            skip = self.level_pass.weight_blocks
        else:
            for level in range(lin.num_levels - 1, -1, -1):
                start, end = int(offsets[level]), int(offsets[level + 1])
                if end > start:
                    whole["leaf" if level == 0 else "internal"].part(start, end).backward(_NOT_WEIGHTS)
        for name, level in whole.items():                     # second pass: the weights
            level.backward(_WEIGHTS, grads, deferred, skip.get(name, ()))
        for load, key, adj, idx in deferred.values():
            grad = grads.of(key)
            _scatter_invariant(grad, idx, adj, self._layouts.setdefault(id(load), [None]))
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


def _stage_ranges(lin) -> dict:
    """{stage: (first node, end)}: the leaves are level 0, the internal nodes every later level."""
    offsets = lin.level_offsets
    return {"leaf": (int(offsets[0]), int(offsets[1])), "internal": (int(offsets[1]), int(offsets[-1]))}


def _check_rules(e, block_name: str):
    """NotImplementedError naming the first operation of a block with no derivative rule."""
    if not e.reads_float:
        return
    if e.kind == "call" and e.name not in _CALL_RULES:
        raise NotImplementedError(f"no derivative rule for {e.name} in block {block_name!r}")
    if e.kind not in ("load", "Add", "Sub", "Mul", "Div", "Min", "Max", "call", "select", "Cast"):
        raise NotImplementedError(f"no derivative rule for {e.kind} in block {block_name!r}")
    for a in e.args:
        _check_rules(a, block_name)


_NOT_WEIGHTS, _WEIGHTS = "tensors and states", "weights"


class _Level:
    """Nodes [offset, offset + size) of one stage: its tensors recomputed, their adjoints.

    The whole stage's nodes are recomputed once (`recompute`); a level is a `part` of that,
    sharing its arrays (views), so a level's adjoints land in the whole stage's arrays."""

    def __init__(self, stage, lin, states, weights, d_states, offset, size):
        self.stage, self.d_states, self.offset, self.size = stage, d_states, offset, size
        self.state_index, self.feature_of = {}, {}
        env = {}
        for key, obj in stage.placeholder_of.items():
            if isinstance(obj, ra.Weight):
                env[key] = weights[obj.name]
            elif isinstance(obj, ra.NodeFeatures):
                self.feature_of[key] = obj
                env[key] = lin.features
            elif isinstance(obj, ra.RecState):
                self.state_index[key] = stage.states.index(obj)
                env[key] = states[self.state_index[key]]
            elif isinstance(obj, ra.NodeInput):
                env[key] = lin.words
            else:
                env[key] = getattr(lin, obj)              # "children", "num_children"
        self.env, self.cache, self.transient = env, {}, frozenset()

    def recompute(self):
        self.values, self.memo = self.stage.evaluate(self.env, self.offset, self.size, self.cache)
        self.adjoints = {b.out: np.zeros_like(self.values[b.out]) for b in self.stage.blocks}

    def allocate(self, row_shapes: dict, workspace: dict, transient=(), in_states=None):
        """Arrays for every block's value (but those of `transient` blocks, which the compiled
        pass keeps itself, and those `in_states` gives: {key: the state's rows}) and adjoint,
        both written by the compiled pass (which zeroes each
        level's adjoint rows before adding into them), rows of `workspace`'s arrays, which the
        next call reuses: fresh memory costs a page fault per 4 KB at its first write (about 10
        ms a step for TreeLSTM h=150, batch 25, here)."""
        self.values, self.adjoints = {}, {}
        for key, shape in row_shapes.items():
            self.adjoints[key] = held_rows(workspace, ("adjoint", key), self.size, shape)
            if key in (in_states or {}):
                self.values[key] = in_states[key]
            elif key not in transient:
                self.values[key] = held_rows(workspace, ("value", key), self.size, shape)
        self.transient = frozenset(transient)
        self.memo = {}

    def is_tensor(self, source) -> bool:
        """Whether `source` is one of the stage's tensors (kept or transient), not an input."""
        return source in self.values or source in self.transient

    def part(self, start, end) -> "_Level":
        """The nodes [start, end) of this range, viewing its values and adjoints."""
        part = object.__new__(_Level)
        part.__dict__.update(self.__dict__)
        rows = slice(start - self.offset, end - self.offset)
        part.offset, part.size = start, end - start
        part.memo = self.stage.slice_memo(self.memo, rows)
        part.values = {k: v[rows] for k, v in self.values.items()}
        part.adjoints = {k: v[rows] for k, v in self.adjoints.items()}
        return part

    def backward(self, sinks, grads=None, deferred=None, skip=()):
        """Adjoints through the blocks, last first, into the `sinks`: the stage's own tensors and
        the children's states (_NOT_WEIGHTS), or the weights (_WEIGHTS, from the tensors'
        adjoints found before)."""
        stage, offset = self.stage, self.offset
        self.grads, self.deferred = grads, deferred
        if sinks == _NOT_WEIGHTS:
            for index, state in enumerate(stage.states):
                self.adjoints[stage.output_key[state]] += self.d_states[index][offset:offset + self.size]
            active = lambda source: (self.is_tensor(source) or source in self.state_index  # noqa: E731
                                     or source in self.feature_of)
        else:
            active = lambda source: (not self.is_tensor(source) and source not in self.state_index  # noqa: E731
                                     and source not in self.feature_of)
        self.active = active
        try:
            for block in reversed(stage.blocks):
                if block.out in skip or not any(active(source) for source in block.body.sources):
                    continue
                ctx = stage.context(self.env, self.values, self.memo, block, offset, self.size, self.cache)
                backprop = _Backprop(self, ctx, block)
                adj = (self.adjoints[block.out], block.spatial)
                if block.reduce_axes:
                    backprop.reduction(block.body, adj)
                else:
                    backprop.expr(block.body, adj)
        finally:
            # `active` closes over self: left here, the cycle would keep the gradients alive
            # until the garbage collector runs, and `Recycled` could not take them back
            self.active = self.grads = self.deferred = None

    # -- where a read's adjoint goes ------------------------------------------------------
    def sink(self, load, ctx, adj):
        source = load.source
        if self.is_tensor(source):                          # a tensor of this stage
            _scatter(self.adjoints[source], load, ctx, adj)
        elif source in self.state_index:                    # a child's state: its row
            _scatter(self.d_states[self.state_index[source]], load, ctx, adj, null_row=NULL_SLOT)
        elif source in self.feature_of:                     # a node's features: its row
            _scatter(self.grads_of_features, load, ctx, adj)
        else:
            weight = self.stage.placeholder_of[source]
            if id(load) in self.stage.invariant:
                idx, axes = ctx.indices(load)
                part = expand(reduce_to(adj, axes), axes)
                held = self.deferred.get(id(load))
                if held is None:
                    self.deferred[id(load)] = [load, weight, np.array(part, np.float32), idx]
                else:
                    held[2] = held[2] + part
            else:
                grad = self.grads.of(weight)
                _scatter(grad, load, ctx, adj)


class _Backprop:
    """Adjoints through one block's expression (values from the level's recomputation)."""

    def __init__(self, level: _Level, ctx, block):
        self.level, self.ctx, self.block = level, ctx, block

    def wanted(self, e) -> bool:
        return any(self.level.active(source) for source in e.sources)

    def expr(self, e, adj):
        if not self.wanted(e):
            return
        kind, val = e.kind, self.ctx.value
        if kind == "load":
            self.level.sink(e, self.ctx, adj)
        elif kind == "Add":
            self.expr(e.args[0], adj)
            self.expr(e.args[1], adj)
        elif kind == "Sub":
            self.expr(e.args[0], adj)
            self.expr(e.args[1], (-adj[0], adj[1]))
        elif kind == "Mul":
            a, b = e.args
            self.expr(a, elementwise(np.multiply, adj, val(b)))
            self.expr(b, elementwise(np.multiply, adj, val(a)))
        elif kind == "Div":
            a, b = e.args
            self.expr(a, elementwise(np.divide, adj, val(b)))
            self.expr(b, elementwise(lambda g, y, d: -g * y / d, adj, val(e), val(b)))
        elif kind == "call":
            self.expr(e.args[0], elementwise(lambda g, y: g * _CALL_RULES[e.name](y), adj, val(e)))
        elif kind in ("Max", "Min"):
            a, b = e.args
            pick_a = elementwise(np.greater_equal if kind == "Max" else np.less_equal, val(a), val(b))
            self.expr(a, elementwise(lambda g, m: np.where(m, g, 0), adj, pick_a))
            self.expr(b, elementwise(lambda g, m: np.where(m, 0, g), adj, pick_a))
        elif kind == "select":
            cond, then, other = e.args
            self.expr(then, elementwise(lambda g, c: np.where(c, g, 0), adj, val(cond)))
            self.expr(other, elementwise(lambda g, c: np.where(c, 0, g), adj, val(cond)))
        elif kind == "Cast":
            self.expr(e.args[0], adj)
        else:                          # _check_rules refused it when the Adjoint was made
            raise NotImplementedError(f"adjoint: no derivative rule for {kind}")

    def reduction(self, e, adj):
        """The adjoint of sum over the block's reduction axes of `e`, `adj` over the output axes."""
        if e.kind in ("Add", "Sub"):
            self.reduction(e.args[0], adj)
            self.reduction(e.args[1], adj if e.kind == "Add" else (-adj[0], adj[1]))
            return
        parts = factors(e)
        values = [self.ctx.value(f) for f in parts]
        for i, f in enumerate(parts):
            if not self.wanted(f):
                continue
            others = [adj] + values[:i] + values[i + 1:]
            g = contract(others, values[i][1], self.ctx.extents)
            g = times_missing(g, others + [values[i]], self.block.reduce_axes, self.ctx.extents)
            self.expr(f, g)


# ----------------------------------------------------------------------------- scatters
def _scatter(target, load, ctx, adj, null_row=None):
    """target[load's indices] += adj (summed over the axes the indices do not vary along);
    null_row: see `_add_rows`."""
    basic = basic_index(load, ctx.extents)
    if basic is not None:
        index, axes = basic
        view = target[index]
        view += expand(reduce_to(adj, axes), axes)
        return
    rows = _row_form(load, ctx, target)
    if rows is not None:
        row_index, row_axes, tail_axes = rows
        part = reduce_to(adj, row_axes + tail_axes)
        block = np.broadcast_to(expand(part, row_axes + tail_axes),
                                row_index.shape + tuple(ctx.extents[a] for a in tail_axes))
        _add_rows(target.reshape(target.shape[0], -1), row_index.reshape(-1),
                  block.reshape(row_index.size, -1), null_row)
        return
    idx, axes = ctx.indices(load)
    part = np.broadcast_to(expand(reduce_to(adj, axes), axes), np.broadcast_shapes(*(i.shape for i in idx)))
    np.add.at(target, tuple(idx), part)


def _row_form(load, ctx, target):
    """(row index array, its axes, the other axes) when the load reads whole rows of `target`:
    a data-dependent first index, then each remaining dimension by a plain axis over all of it
    (`h[children[offset + n, j], k]`, `emb[word[offset + n], e]`); None otherwise."""
    first, rest = load.args[0], load.args[1:]
    tail = []
    for dim, a in enumerate(rest, start=1):
        if a.kind != "var" or a.name == "offset" or a.name in tail or ctx.extents[a.name] != target.shape[dim]:
            return None
        tail.append(a.name)
    row, row_axes = ctx.value(first)
    if any(a in tail for a in row_axes):
        return None
    return np.asarray(row), row_axes, tuple(tail)


def _add_rows(target2, rows, block, null_row=None):
    """target2[rows[i]] += block[i] for every i, rows possibly repeated (a node of a DAG has several
    parents, a word recurs): repeated rows are summed first (sorted, `np.add.reduceat`), in a
    fixed order.  Rows equal to `null_row` (the null node, which every missing child reads and
    whose adjoint nobody reads) are left out."""
    if null_row is not None:
        keep = rows != null_row
        rows, block = rows[keep], block[keep]
    if rows.size == 0:
        return
    if np.bincount(rows).max() == 1:                  # a tree's children: one parent each
        target2[rows] += block
        return
    order = np.argsort(rows, kind="stable")
    sorted_rows = rows[order]
    starts = np.flatnonzero(np.r_[True, sorted_rows[1:] != sorted_rows[:-1]])
    target2[sorted_rows[starts]] += np.add.reduceat(block[order], starts, axis=0)


def _scatter_invariant(grad, idx, adj, layout):
    """grad[idx] += adj for a weight read at the same elements by every level.  layout: a
    one-element list holding, once found, how idx lays the read out in the weight: "all" (every
    element once, in order: a reshape, `U[g*H + i, j*H + k]`), "distinct" or "repeated"."""
    full = np.broadcast_shapes(*(i.shape for i in idx))
    values = np.broadcast_to(adj, full).reshape(-1)
    flat_grad = grad.reshape(-1)
    if layout[0] == "all":
        flat_grad += values
        return
    flat = np.ravel_multi_index(tuple(np.broadcast_to(i, full) for i in idx), grad.shape).reshape(-1)
    if layout[0] is None:
        layout[0] = ("all" if flat.size == flat_grad.size and (flat == np.arange(flat.size)).all()
                     else "distinct" if np.unique(flat).size == flat.size else "repeated")
    if layout[0] == "repeated":
        np.add.at(flat_grad, flat, values)
    else:
        flat_grad[flat] += values
