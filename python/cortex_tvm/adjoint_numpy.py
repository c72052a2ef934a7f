"""The numpy backward of one stage's levels: its tensors recomputed, and the adjoints of a
level's states carried back through the blocks by the derivative rules into the stage's
tensors, the children's states, per-node features and the weights (`adjoint.Adjoint` runs it
level by level, or hands the levels to the compiled pass and keeps the weights' pass here).

* an elementwise expression by the rules in `_Backprop.expr` (`+ - * /`, sigmoid, tanh, exp,
  min/max (relu), if_then_else); any other operation is refused by name (`check_rules`);
* a reduction `sum_k a[..k..] * b[..k..]` as matrix products (`stage_numpy.contract`);
* a read scatters its adjoint back to where it read (`_scatter`; `scatter_invariant` for a
  weight every level reads alike, once at the end).
"""
from __future__ import annotations

import numpy as np

from . import ra
from .linearize import NULL_SLOT
from .named_axes import contract, elementwise, expand, reduce_to, times_missing
from .scratch import held_rows
from .stage_numpy import basic_index, factors, reads_in_order

#: what the backward differentiates, for error messages
RULES = "+ - * /, min, max (relu), sigmoid, tanh, exp, if_then_else, sums"
#: the TIR calls with a derivative rule (d/dx of f in terms of y = f(x))
_CALL_RULES = {"tirx.sigmoid": lambda y: y * (1.0 - y), "tirx.tanh": lambda y: 1.0 - y * y,
               "tirx.exp": lambda y: y}


def check_rules(e, block_name: str):
    """NotImplementedError naming the first operation of a block with no derivative rule."""
    if not e.reads_float:
        return
    if e.kind == "call" and e.name not in _CALL_RULES:
        raise NotImplementedError(f"no derivative rule for {e.name} in block {block_name!r}")
    if e.kind not in ("load", "Add", "Sub", "Mul", "Div", "Min", "Max", "call", "select", "Cast"):
        raise NotImplementedError(f"no derivative rule for {e.kind} in block {block_name!r}")
    for a in e.args:
        check_rules(a, block_name)


NOT_WEIGHTS, WEIGHTS = "tensors and states", "weights"


class Level:
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

    def part(self, start, end) -> "Level":
        """The nodes [start, end) of this range, viewing its values and adjoints."""
        part = object.__new__(Level)
        part.__dict__.update(self.__dict__)
        rows = slice(start - self.offset, end - self.offset)
        part.offset, part.size = start, end - start
        part.memo = self.stage.slice_memo(self.memo, rows)
        part.values = {k: v[rows] for k, v in self.values.items()}
        part.adjoints = {k: v[rows] for k, v in self.adjoints.items()}
        return part

    def backward(self, sinks, grads=None, deferred=None, skip=()):
        """Adjoints through the blocks, last first, into the `sinks`: the stage's own tensors and
        the children's states (NOT_WEIGHTS), or the weights (WEIGHTS, from the tensors'
        adjoints found before)."""
        stage, offset = self.stage, self.offset
        self.grads, self.deferred = grads, deferred
        if sinks == NOT_WEIGHTS:
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

    def __init__(self, level: Level, ctx, block):
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
        else:                          # check_rules refused it when the Adjoint was made
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


def scatter_invariant(grad, idx, adj, layout):
    """grad[idx] += adj for a weight read at the same elements by every level.  layout: a
    one-element list holding, once found, how idx lays the read out in the weight: "all" (every
    element once, in order: a reshape, `U[g*H + i, j*H + k]`), "distinct" or "repeated"."""
    full = np.broadcast_shapes(*(i.shape for i in idx))
    values = np.broadcast_to(adj, full).reshape(-1)
    flat_grad = grad.reshape(-1)
    if layout[0] is None and reads_in_order(idx, grad.shape):
        layout[0] = "all"
    if layout[0] == "all":
        flat_grad += values
        return
    flat = np.ravel_multi_index(tuple(np.broadcast_to(i, full) for i in idx), grad.shape).reshape(-1)
    if layout[0] is None:
        layout[0] = "distinct" if np.unique(flat).size == flat.size else "repeated"
    if layout[0] == "repeated":
        np.add.at(flat_grad, flat, values)
    else:
        flat_grad[flat] += values
