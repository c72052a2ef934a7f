"""The training forward, the level pass and the weight sums of the backward, as TIR functions
(built and called by `adjoint_pass.LevelPass`).

The adjoint (`adjoint.py`) has one sequential part: from the roots down, each level's state
adjoints flow through its stage's blocks into the adjoints of the stage's tensors and of its
children's states.  In numpy that costs about a millisecond of calls per level, whatever the
level's size, and the recomputation of every block's tensor before it allocates an array per
operation.  Here both are emitted as TIR from the same stages and rules (`adjoint_emit`), as
functions per program that share one parameter list (`level_pass`'s parts):

    "forward":   for each level, from the leaves up: its nodes' block values
                 and states                                       (a run of nodes per core)
    "backward":  for each internal level, from the top down: its adjoints (a run per core)
                 the leaves' adjoints
                 the node-independent weight reads' sums over all nodes (tiles of the sums)
    "all":       every node's block values from the saved states, then "backward"

`vjp` runs "forward", and its pullback "backward" on the values "forward" kept; "all" serves a
pullback whose values a later forward overwrote.
A tree's child has one parent, so no two nodes of a level write the same row; a batch with a
node shared by two parents runs the function's serial twin, built the first time one comes.
A weight read through the node's word (`emb[word[offset + n], e]`) gets one adjoint row per
node here, and after the levels the rows are added into the weight's gradient by word, node
after node (a word recurs in a batch: serial, in a fixed order, no atomics).  Only blocks that read a weight
through the node in another form are left to its numpy weight pass.
"""
from __future__ import annotations

import functools

import numpy as np
import tvm
import tvm_ffi
from tvm import tirx
from tvm.script.ir_builder import IRBuilder
from tvm.script.ir_builder import tirx as Tb

from . import adjoint_gpu, fast_math, ra
from .adjoint_copies import Transposed, Widened, copied_reads, emit_transpose, emit_widen
from .adjoint_emit import StageEmitter
from .adjoint_gpu import GpuStageEmitter
from .adjoint_weights import emit_weight_read, index_arrays, weight_blocks
from .tir_builder import row_elements

#: the compiled functions: every level in parallel over its nodes, or serially (shared nodes)
PARALLEL, SERIAL = "cortex_adjoint_levels", "cortex_adjoint_levels_serial"
#: the function names of each part (`level_pass`), parallel and serial
NAMES = {"all": {True: PARALLEL, False: SERIAL},
         "forward": {True: "cortex_adjoint_forward", False: "cortex_adjoint_forward_serial"},
         "backward": {True: "cortex_adjoint_backward", False: "cortex_adjoint_backward_serial"}}


def level_pass(stages: dict, numpy_stages: dict, program: ra.RecProgram, lanes: int = 8,
               parallel: bool = True, cores: int = 1, part: str = "all", transient=None, gpu: bool = False,
               vectors: int = 1, bf16: bool = False, amx: bool = False) -> tuple:
    """(PrimFunc, its parameters) of the level pass for the stages "leaf" and "internal"
    (`lower.build_stage`) and their `StageNumpy` twins; `lanes`: float32 lanes of a vector;
    parallel: each level's nodes in `cores` runs in a parallel loop (PARALLEL), or in a serial
    loop (SERIAL).  part: "all" (the recomputation of every node's values, then the levels
    from the roots down and the weights' sums), "forward" (the values level by level from the
    leaves up, each level's states written from them: the training forward, which leaves
    the values for "backward"), or "backward" (the levels and the sums alone).  Every part
    takes the same parameters.

    Parameters, in order: ("level_offsets",), ("leaf_sources",) (the leaves that repeat an
    earlier leaf's word, `distinct_leaves`: the passes compute level 0 but those, which copy
    their word's first leaf's states in "forward" and add their adjoints into its own before
    the leaves' backward; a GPU build runs every leaf and takes none), ("placeholder", key) for
    each int input and weight the stages read, ("state", s) then ("d_state", s) for each state
    (N, *shape), ("d_features", input) for each per-node feature input (`ra.node_features`, read
    as a ("placeholder", input) of (N, F) rows: its adjoint, a row per slot, zeros from the
    caller, each node adding into its own), per stage
    ("transposed", weight, shape) for each weight its recomputation reads transposed
    (`adjoint_copies.Transposed`) and ("value" |
    "adj", stage, key, row shape) for each block (the stage's rows),
    ("weight_read", stage, key, ordinal, shape, weight, index arrays) for each node-independent
    weight read whose gradient the function sums (`adjoint_weights`), ("gathered", stage, key,
    weight, node input) for each read through the node's input: the adjoint of the weight's row
    that each node (a row of the stage) reads, and ("gathered_sum", weight) for each weight read
    so: its gradient (zeros from the caller), into which the function adds those rows; after
    the states' and the features' adjoints, ("widened", weight, shape) for each weight the
    nests read along its last axis in blocks (`adjoint_copies.Widened`, not on a GPU): its copy,
    which "forward" and "all" write and "backward" reads.
    In "forward" and "backward", the value array of a block that makes a state
    (`StageEmitter.state_blocks`) is the state's rows of the stage's nodes (its value
    parameter, the same rows, is not read): the forward keeps each state once; "all", which
    recomputes the values on states another kernel computed, writes its own value arrays.
    transient: {stage: keys of the blocks whose values the backward never reads}
    (`transient_blocks`): their value parameters are ("transient", stage, key, row shape)
    instead, arrays of rows by position in a level (`StageEmitter.transient`): one level's
    nodes for "forward", all of the stage's for "all".
    vectors: a register tile's vectors per node (`adjoint_nest.tile_vectors`).  bf16: the
    contractions on bfloat16 pairs (`adjoint_bf16`); amx: their whole tiles on AMX tiles
    (`adjoint_amx`; a CPU with AMX-BF16).
    gpu: the same function laid out for a GPU (`adjoint_gpu`: a level's nodes on thread
    blocks, a nest's elements on threads, the level loop on the host).
    Raises Unsupported where a stage has a shape this does not emit."""
    emitters = {name: GpuStageEmitter(stages[name], numpy_stages[name], grid=None) if gpu else
                StageEmitter(stages[name], numpy_stages[name], lanes, cores, vectors, bf16, amx)
                for name in ("leaf", "internal")}
    sum_nest, add_rows = (adjoint_gpu.emit_weight_read, adjoint_gpu.emit_add_rows) if gpu else \
        (emit_weight_read, functools.partial(_emit_add_rows, lanes=lanes))
    for name, keys in (transient or {}).items():
        emitters[name].transient = set(keys)
    weight_reads = {name: weight_blocks(emitter) for name, emitter in emitters.items()}
    fname = NAMES[part][parallel]
    params = []
    with IRBuilder() as ib:
        with Tb.prim_func():
            Tb.func_name(fname)
            Tb.func_attr({"tirx.noalias": True, "global_symbol": fname})
            N, L1 = Tb.int32(), Tb.int32()
            if gpu:
                for emitter in emitters.values():
                    emitter.grid = N                # a level's blocks: every slot of the batch
            level_offsets = _arg("level_offsets", (L1,), "int32")
            params.append(("level_offsets",))
            repeats = Tb.int32()
            leaf_sources = _arg("leaf_sources", (repeats,), "int32")
            params.append(("leaf_sources",))
            placeholders, inputs, transposed_inputs = {}, {}, {}
            for name in ("leaf", "internal"):
                for key, te_buf in stages[name].placeholders.items():
                    if isinstance(key, ra.RecState):
                        continue
                    if key not in inputs:
                        if isinstance(key, ra.NodeFeatures):        # a row per slot, like a state
                            shape, dtype = (N, key.size), key.dtype
                        else:
                            shape = key.shape if isinstance(key, ra.Weight) else (
                                (N, program.spec.max_children) if key == "children" else (N,))
                            dtype = key.dtype if isinstance(key, ra.Weight) else "int32"
                        inputs[key] = _arg(getattr(key, "name", key), shape, dtype)
                        params.append(("placeholder", key))
                    placeholders[te_buf] = inputs[key]
            states, d_states = {}, {}
            for s in program.states:
                states[s] = _arg(s.name, (N,) + s.shape, s.dtype)
                params.append(("state", s))
            for s in program.states:
                d_states[s] = _arg("d_" + s.name, (N,) + s.shape, s.dtype)
                params.append(("d_state", s))
            d_features = {}
            for key in inputs:
                if isinstance(key, ra.NodeFeatures):
                    d_features[key] = _arg("d_" + key.name, (N, key.size), key.dtype)
                    params.append(("d_features", key))
            for emitter in emitters.values():
                for te_buf, state in emitter.state_of.items():
                    placeholders[te_buf] = states[state]
            copied = {name: copied_reads(e) for name, e in emitters.items()}
            transposed = {name: reads for name, (reads, _) in copied.items()}
            blocks, widen = {}, {}                       # (a block both stages read alike, or None)
            for reads, widened in copied.values():
                for key, (_, block) in reads.items():
                    blocks[key] = block if blocks.get(key, block) == block else None
                for key, block in widened.items():
                    widen[key] = block if widen.get(key, block) == block else None
            widened_inputs = {}
            for key, block in widen.items():
                if block is not None and not gpu and key in inputs:
                    layout = Widened(key.shape, block, pairs=bf16)
                    widened_inputs[key] = (_arg(key.name + "_panels", layout.shape, layout.dtype), layout)
                    params.append(("widened", key, layout.shape, layout.dtype))
            per_stage = {}
            for name, emitter in emitters.items():
                rows, positions = Tb.int32(), Tb.int32()
                value, adj, transposes = {}, {}, {}
                for key, (te_buf, _) in transposed[name].items():
                    if key not in transposed_inputs:     # (a GPU's caller transposes them: plainly)
                        layout = Transposed(key.shape, None if gpu else blocks[key], pairs=bf16)
                        transposed_inputs[key] = (_arg(key.name + "_T", layout.shape, layout.dtype), layout)
                        params.append(("transposed", key, layout.shape, layout.dtype))
                    transposes[te_buf] = transposed_inputs[key]
                for block in emitter.blocks:
                    row_shape = tuple(int(d) for d in block.out.shape[1:])
                    kept = block.key not in emitter.transient
                    value[block.key] = _arg(f"{name}_{block.out.name}", ((rows if kept else positions),) + row_shape,
                                            "float32")
                    params.append(("value" if kept else "transient", name, block.key, row_shape))
                    adj[block.key] = _arg(f"d_{name}_{block.out.name}", (rows,) + row_shape, "float32")
                    params.append(("adj", name, block.key, row_shape))
                gathered = {}
                for index, (block, load, node_input) in enumerate(emitter.gathered):
                    weight = emitter.weight_of(load.source)
                    gathered[index] = _arg(f"d_{name}_{weight.name}_rows{index}", (rows,) + weight.shape[1:],
                                           "float32")
                    params.append(("gathered", name, block.key, weight, node_input))
                per_stage[name] = {"value": value, "adj": adj, "placeholder": placeholders, "d_state": d_states,
                                   "d_features": d_features,
                                   "transposed": transposes, "gathered": gathered, "state": states,
                                   "widened": {stages[name].placeholders[key]: copy
                                               for key, copy in widened_inputs.items()
                                               if key in stages[name].placeholders}}
            # the leaves a pass runs on: each word's first (`distinct_leaves`; a GPU gets none repeated)
            nodes_of = {"leaf": (level_offsets[0], level_offsets[1] - level_offsets[0] - (0 if gpu else repeats)),
                        "internal": (level_offsets[1], level_offsets[L1 - 1] - level_offsets[1])}
            # the weights' gradients: every parameter comes before the first statement
            sums, dense = [], {}
            for name in ("leaf", "internal"):
                for block, stand_in, reads in weight_reads[name]:
                    for ordinal, (load, coeff, axes) in enumerate(reads):
                        shape = tuple(int(ext) for _, ext in axes)
                        out = _arg(f"grad_{name}_{block.out.name}_{ordinal}", shape, "float32")
                        params.append(("weight_read", name, block.key, ordinal, shape,
                                       emitters[name].weight_of(load.source), index_arrays(load, axes)))
                        sums.append((name, block, stand_in, load, coeff, axes, out))
            for name in ("leaf", "internal"):
                for block, load, node_input in emitters[name].gathered:
                    weight = emitters[name].weight_of(load.source)
                    if weight not in dense:
                        dense[weight] = _arg(f"grad_{weight.name}", weight.shape, "float32")
                        params.append(("gathered_sum", weight))
            for name, emitter in emitters.items():
                if part != "all":
                    emitter.state_values = _state_rows(emitter, per_stage[name]["value"], states,
                                                       level_offsets[0 if name == "leaf" else 1])
            leaves = nodes_of["leaf"]
            repeated = None if gpu else (leaf_sources, leaves[0] + leaves[1], repeats)
            if part != "backward" and not gpu:     # (a GPU's caller transposes them on the host)
                for key, (transposed, layout) in transposed_inputs.items():
                    emit_transpose(inputs[key], transposed, layout)
                for key, (widened, layout) in widened_inputs.items():      # ("backward" reads the forward's)
                    emit_widen(inputs[key], widened, layout, lanes)
            if part == "all":
                # every node's values first (no recursion left: the states are known), then the levels
                emitters["leaf"].emit_recompute(per_stage["leaf"], *leaves, parallel)
                emitters["internal"].emit_recompute(per_stage["internal"], level_offsets[1],
                                                    level_offsets[L1 - 1] - level_offsets[1], parallel)
            elif part == "forward":
                # the leaves, then each level on the states of the one below
                emitters["leaf"].emit_recompute(per_stage["leaf"], *leaves, parallel, write_states=True)
                if repeated is not None:
                    _emit_repeated_leaves(states, *repeated, lanes, copy=True)
                with Tb.serial(1, L1 - 1) as level:
                    start = level_offsets[level]
                    emitters["internal"].emit_recompute(per_stage["internal"], start, level_offsets[level + 1] - start,
                                                        parallel, row_base=start - level_offsets[1],
                                                        write_states=True)
            if part != "forward":
                with Tb.serial(0, L1 - 2) as down:                  # the internal levels, top down
                    level = L1 - 2 - down
                    start = level_offsets[level]
                    emitters["internal"].emit_level(per_stage["internal"], start, level_offsets[level + 1] - start,
                                                    start - level_offsets[1], parallel)
                if repeated is not None:            # a repeated leaf's adjoint is its word's first leaf's
                    _emit_repeated_leaves(d_states, *repeated, lanes, copy=False)
                emitters["leaf"].emit_level(per_stage["leaf"], *leaves, 0, parallel)
                # the gradients of the weights every level reads alike, over all of a stage's nodes
                for name, block, stand_in, load, coeff, axes, out in sums:
                    sum_nest(emitters[name], block, stand_in, load, coeff, axes, out, per_stage[name], *nodes_of[name])
                # the rows read through the node's input, added into the weight's gradient by the
                # input: serially, node after node (a word recurs; a fixed order, no atomics)
                for name in ("leaf", "internal"):
                    for index, (block, load, node_input) in enumerate(emitters[name].gathered):
                        weight = emitters[name].weight_of(load.source)
                        add_rows(dense[weight], per_stage[name]["gathered"][index], inputs[node_input],
                                 *nodes_of[name], last=node_input.last_row)
    return fast_math.rewrite(ib.get()), params


def _state_rows(emitter, value: dict, states: dict, first_node) -> set:
    """Point the value arrays (`value`, key -> buffer) of the stage's blocks that make a
    state at the state's rows of the stage's nodes, from `first_node` on: one array holds both
    (`StageEmitter.state_blocks`).  Returns those states (a DeclBuffer each: after the last
    parameter)."""
    found = emitter.state_blocks()
    for state, key in found.items():
        row = value[key]
        value[key] = Tb.decl_buffer(row.shape, "float32", data=states[state].data,
                                    elem_offset=first_node * int(np.prod([int(d) for d in row.shape[1:]])))
    return set(found)


def _emit_repeated_leaves(arrays: dict, sources, first_repeat, count, lanes, copy: bool):
    """For each repeated leaf j (`distinct_leaves`), at slot first_repeat + j, and each array of
    `arrays` (state -> (N, *shape) rows): copy=True, its row becomes the row of its word's first
    leaf, slot sources[j] (the forward's states); copy=False, its row is added into that one
    (the adjoints: serially, in a fixed order, since a word repeats many times)."""
    with (Tb.parallel if copy else Tb.serial)(0, count) as j:
        source = Tb.bind(sources[j])
        for rows in arrays.values():
            def element(ix, rows=rows):
                repeat, first = [first_repeat + j] + ix, [source] + ix
                Tb.buffer_store(rows, rows[first] if copy else rows[first] + rows[repeat], repeat if copy else first)
            row_elements([int(d) for d in rows.shape[1:]], lanes, element)


def _emit_add_rows(grad, rows, by, offset, count, lanes, last=None):
    """grad[by[offset + n], ...] += rows[n, ...] for n in range(count), in order; with `last`, at
    row min(by[offset + n], last), where the forward read (`ra.NodeInput.last_row`)."""
    with Tb.serial(0, count) as n:
        at = Tb.bind(by[offset + n] if last is None else tirx.min(by[offset + n], last))
        row_elements([int(d) for d in grad.shape[1:]], lanes,
                      lambda ix: Tb.buffer_store(grad, grad[[at] + ix] + rows[[n] + ix], [at] + ix))


def transient_blocks(stages: dict, numpy_stages: dict, program: ra.RecProgram, lanes: int, cores: int) -> dict:
    """{stage: keys of the blocks whose values the training forward need not keep}: the
    backward ("backward" part) reads no value of theirs, they make no state, and the stage has
    no block left to the numpy weight pass (which reads the values).  TreeLSTM's gates_sum
    (5 vectors of H per node, read by its gates alone) is one: its node keeps 7 vectors, not 12."""
    func, params = level_pass(stages, numpy_stages, program, lanes, True, cores, part="backward")
    loaded = set()
    tvm_ffi.structural_walk(func.body, (tvm.ir.TensorLoad, lambda ld: loaded.add(ld.source.name)), order="post")
    found = {}
    for name in ("leaf", "internal"):
        emitter = StageEmitter(stages[name], numpy_stages[name], lanes, cores)
        compiled_sums = {p[2] for p in params if p[0] in ("weight_read", "gathered") and p[1] == name}
        reads_weight = {block.key for block in emitter.blocks if _reads_weight(emitter, block)}
        if reads_weight - compiled_sums:
            continue
        states = {emitter._tensor_key(buf) for buf in emitter.output_of.values()}
        # (a value parameter's buffer is named as `level_pass` names it)
        found[name] = {block.key for block in emitter.blocks
                       if block.key not in states and f"{name}_{block.out.name}" not in loaded}
    return found


def _reads_weight(emitter, block) -> bool:
    found = []
    tvm_ffi.structural_walk(block.body, (tvm.ir.TensorLoad, lambda ld: found.append(emitter.weight_of(ld.source))),
                            order="post")
    return any(weight is not None for weight in found)


def _arg(name, shape, dtype):
    return Tb.arg(name, Tb.buffer(shape, dtype, buffer_name=name, align=4))
