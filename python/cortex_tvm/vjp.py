"""`CompiledModel.vjp`'s work (its docstring is the contract): the batch laid out for the backward,
the forward that keeps what the backward needs, and the pullback that runs the backward
(`adjoint.Adjoint`, the compiled model's: this module imports nothing of the compile side, and
is on the deploy side with `runtime`, which owns the kernel's call and the weights)."""
from __future__ import annotations

import functools

import numpy as np

from .call_args import Pullback, adjoint_array, one_input
from .weights import check_rows


def vjp(compiled, trees, all_nodes: bool, parents, words, features):
    """(out, Pullback) of `compiled.vjp(trees, all_nodes, parents=, words=, features=)`."""
    adjoint = compiled.adjoint
    if adjoint is None:
        raise ValueError("vjp: this model has no backward pass: compile it with training=True "
                         "(model.compile(training=True) or ct.compile(..., training=True)); a model "
                         "loaded from an export has none")
    one_input(trees, parents, words, "vjp: ")
    arrays = parents is not None
    # one node per slot, level by level
    forest = functools.partial(compiled.signature.layout_parents, parents, words, 1, True, compiled._vocab_bound,
                               features=features) if arrays else None
    plain = adjoint.lay_out(trees, features, forest)
    unchecked = compiled._rows_unchecked                  # (`load_weights` left them to a batch)
    batch_rows = adjoint.word_rows(plain) if unchecked else None
    weights = compiled.training_weights
    check_rows(weights, batch_rows, "vjp", unchecked)
    forwarded = adjoint.forward(plain, weights)
    if forwarded is not None:       # the backward's own forward, which keeps what it needs
        saved, token = forwarded
    else:                           # the kernel's states, moved to the backward's layout
        saved, token = _kernel_states(compiled, plain, trees, parents, words, features), None
    if all_nodes:
        out = saved[0][plain.node_slots]
        if not arrays:
            out = np.split(out, np.cumsum(plain.tree_sizes)[:-1])
    else:
        out = saved[0][plain.roots]
    shape = compiled.state_shapes[0]

    def pullback(d_out, rows):
        d_states = adjoint.state_adjoints(plain.num_slots)
        if all_nodes:
            d_rows = adjoint_array(d_out, (len(plain.node_slots),) + shape, "per-node states", True)
            d_states[0][plain.node_slots] = d_rows
        else:
            d_rows = adjoint_array(d_out, (len(plain.roots),) + shape, "root states", False)
            d_states[0][plain.roots] = d_rows      # (each tree's root its own slot, as every node's)
        grads = adjoint.vjp(plain, saved, weights, d_states, forwarded=token, scratch=True,
                            word_rows=rows)     # (not pullback's: a cycle)
        # (not grads.get(name, np.zeros_like(w)): that zeroes a copy of every weight, the
        # embedding table's megabytes included, on every call)
        out = {name: grads[name] if name in grads else np.zeros_like(w) for name, w in weights.items()}
        if adjoint.features is not None:       # the features' rows, in the caller's order
            out[adjoint.features.name] = grads[adjoint.features.name][plain.node_slots]
        return out
    return out, Pullback(pullback, adjoint, plain, batch_rows)


def _kernel_states(compiled, plain, trees, parents, words, features) -> list:
    """The model's kernel's states on the batch, each (plain.num_slots, *shape) in `plain`'s slots."""
    lin = (compiled.linearize_parents(parents, words, features) if parents is not None
           else compiled.linearize(trees, features))
    _, states = compiled.run(lin, check=compiled.bounds_check)
    saved = []
    for state, shape in zip(states, compiled.state_shapes):
        rows = np.zeros((plain.num_slots,) + shape, np.float32)
        rows[plain.node_slots] = state[lin.node_slots][(slice(None),) + tuple(slice(0, d) for d in shape)]
        saved.append(rows)
    return saved
