"""Lowering step 1 (`lower.build_stage`): one case of an RA program as a TE loop nest.

Every compute of the case gets a leading axis over one level's nodes (node id = level start
+ position) and becomes a block of one PrimFunc made by TVM's own `te.create_prim_func`;
`lower.assemble` splices that PrimFunc into the kernel's level loop.  The numpy evaluator
(`stage_numpy`) and the backward read the same stages.
"""
from __future__ import annotations

from dataclasses import dataclass

import tvm
import tvm_ffi
from tvm import te, tirx

from . import ra


@dataclass
class Stage:
    """One stage (leaf or internal) as a TE-made PrimFunc, with its RA <-> buffer maps."""

    name: str
    func: tirx.PrimFunc
    placeholders: dict        # RA object (or "children"/"num_children") -> te param buffer
    outputs: dict             # RecState -> te output buffer (rows = level positions)
    offset: tirx.Var          # first node id of the level
    size: tirx.Var            # number of nodes in the level


class _Placeholders(dict):
    """RA inputs -> te.placeholder, created on first read (so unused inputs never appear)."""

    def __init__(self, num_slots, max_children):
        super().__init__()
        self.num_slots, self.max_children = num_slots, max_children

    def __missing__(self, key):
        n = self.num_slots
        if key == "children":
            t = te.placeholder((n, self.max_children), "int32", name="children")
        elif key == "num_children":
            t = te.placeholder((n,), "int32", name="num_children")
        elif isinstance(key, ra.NodeInput):
            t = te.placeholder((n,), "int32", name=key.name)
        elif isinstance(key, ra.NodeFeatures):
            t = te.placeholder((n, key.size), key.dtype, name=key.name)
        elif isinstance(key, ra.Weight):
            t = te.placeholder(key.shape, key.dtype, name=key.name)
        elif isinstance(key, ra.RecState):
            t = te.placeholder((n,) + key.shape, key.dtype, name=key.name)
        else:
            raise TypeError(f"cannot read {key!r} inside an RA compute")
        self[key] = t
        return t


def build_stage(program: ra.RecProgram, stage: str) -> Stage:
    """TE for one stage: every compute gets a leading axis over the level's nodes.

    stage: "leaf", "internal", or "both" (no specialization: each state's new
    value selects the leaf or internal value with `num_children[n] == 0`).
    """
    offset, size, num_slots = te.var("offset"), te.var("level_size"), te.var("num_slots")
    placeholders = _Placeholders(num_slots, program.spec.max_children)
    binding = ra.Binding(node=None, position=None, tensors={}, placeholders=placeholders)
    cases = (program.leaf, program.internal) if stage == "both" else (getattr(program, stage),)
    state_computes = {id(case[s]) for case in cases for s in program.states}

    def instantiate(c: ra.Compute):
        position = tirx.Var("position", "int32")
        idx = [tirx.Var(f"i{d}", "int32") for d in range(len(c.shape))]
        saved = binding.node, binding.position
        binding.node, binding.position = offset + position, position
        try:
            expr = c.fcompute(*idx)
        finally:
            binding.node, binding.position = saved
        return _te_compute((size,) + c.shape, [position] + idx, expr, c.name,
                           split_reduction=id(c) in state_computes)

    def tensor(c):
        if c not in binding.tensors:
            binding.tensors[c] = instantiate(c)
        return binding.tensors[c]

    binding.instantiate = instantiate
    with ra.binding(binding):
        if stage == "both":
            outputs = {}
            for state in program.states:
                leaf, internal = tensor(program.leaf[state]), tensor(program.internal[state])
                outputs[state] = te.compute((size,) + state.shape,
                                            _select(placeholders["num_children"], offset, leaf, internal),
                                            name=f"{state.name}_select")
        else:
            outputs = {state: tensor(getattr(program, stage)[state]) for state in program.states}
    args = list(placeholders.values()) + [offset] + list(outputs.values())
    func = te.create_prim_func(args)
    params = dict(zip(args, func.params))
    return Stage(stage, func, {k: params[t] for k, t in placeholders.items()},
                 {s: params[t] for s, t in outputs.items()}, params[offset], size)


def _select(num_children, offset, leaf, internal):
    """fcompute choosing the leaf value at leaves and the internal value elsewhere."""
    def body(j, *i):
        return tirx.if_then_else(num_children[offset + j] == 0, leaf[(j,) + i], internal[(j,) + i])
    return body


def _te_compute(shape, variables, expr, name, split_reduction=False):
    """te.compute from an expression over `variables`.

    TE wants a reduction to be a whole compute body; RA lets users write
    `tanh(sum(...) + b)`, so each nested reduction becomes its own compute
    (`<name>_sum`, `<name>_sum1`, ...) read back at the same index.  With
    `split_reduction` (a recursive state's compute) a bare `sum(...)` does too:
    accumulating straight into the state would read and write one buffer in the
    reduction (the children's rows and the node's own), which keeps the
    accumulators out of registers; the state is then written once, from `<name>_sum`.
    """
    def substitute(e, mapping):
        return tvm_ffi.structural_map(e, (tvm.ir.Var, lambda v: mapping.get(v, v)), order="post")

    def make(body, tensor_name):
        return te.compute(shape, lambda *ix: substitute(body, dict(zip(variables, ix))), name=tensor_name)

    if isinstance(expr, tirx.Reduce) and not split_reduction:
        return make(expr, name)
    nested = []
    tvm_ffi.structural_walk(expr, (tirx.Reduce, nested.append), order="post")
    replaced = {}
    for k, reduction in enumerate(nested):
        aux = make(reduction, f"{name}_sum" + (str(k) if k else ""))
        replaced[reduction] = aux[tuple(variables)]
    if replaced:
        expr = tvm_ffi.structural_map(expr, (tirx.Reduce, lambda r: replaced.get(r, r)), order="post")
    return make(expr, name)
