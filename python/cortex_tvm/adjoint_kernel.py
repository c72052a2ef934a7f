"""The training forward, the level pass and the weight sums of the backward, compiled as TIR.

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

import threading

import numpy as np
import tvm
import tvm_ffi
from tvm.script.ir_builder import IRBuilder
from tvm.script.ir_builder import tirx as Tb

from . import fast_math, ra, tir_pipeline
from .adjoint_emit import StageEmitter
from .adjoint_weights import emit_weight_read, index_arrays, weight_blocks
from .linearize import NULL_SLOT
from .scratch import held_rows, zero
from .target import cpu_info
from .tir_builder import as_list, vector_loop

#: the compiled functions: every level in parallel over its nodes, or serially (shared nodes)
PARALLEL, SERIAL = "cortex_adjoint_levels", "cortex_adjoint_levels_serial"
#: the average nodes per core of a batch's internal levels from which `vjp` runs the "forward"
#: part rather than the kernel (`LevelPass.forward_pays`)
FORWARD_NODES_PER_CORE = 1
#: the function names of each part (`level_pass`), parallel and serial
NAMES = {"all": {True: PARALLEL, False: SERIAL},
         "forward": {True: "cortex_adjoint_forward", False: "cortex_adjoint_forward_serial"},
         "backward": {True: "cortex_adjoint_backward", False: "cortex_adjoint_backward_serial"}}


def level_pass(stages: dict, numpy_stages: dict, program: ra.RecProgram, lanes: int = 8,
               parallel: bool = True, cores: int = 1, part: str = "all", transient=None) -> tuple:
    """(PrimFunc, its parameters) of the level pass for the stages "leaf" and "internal"
    (`lower.build_stage`) and their `StageNumpy` twins; `lanes`: float32 lanes of a vector;
    parallel: each level's nodes in `cores` runs in a parallel loop (PARALLEL), or in a serial
    loop (SERIAL).  part: "all" (the recomputation of every node's values, then the levels
    from the roots down and the weights' sums), "forward" (the values level by level from the
    leaves up, each level's states written from them: the training forward, which leaves
    the values for "backward"), or "backward" (the levels and the sums alone).  Every part
    takes the same parameters.

    Parameters, in order: ("level_offsets",), ("placeholder", key) for each int input and weight
    the stages read, ("state", s) then ("d_state", s) for each state (N, *shape), per stage
    ("transposed", weight) for each weight its recomputation reads transposed and ("value" |
    "adj", stage, key, row shape) for each block (the stage's rows),
    ("weight_read", stage, key, ordinal, shape, weight, index arrays) for each node-independent
    weight read whose gradient the function sums (`adjoint_weights`), ("gathered", stage, key,
    weight, node input) for each read through the node's input: the adjoint of the weight's row
    that each node (a row of the stage) reads, and ("gathered_sum", weight) for each weight read
    so: its gradient (zeros from the caller), into which the function adds those rows.
    In "forward" and "backward", the value array of a block that makes a state
    (`StageEmitter.state_blocks`) is the state's rows of the stage's nodes (its value
    parameter, the same rows, is not read): the forward keeps each state once; "all", which
    recomputes the values on states another kernel computed, writes its own value arrays.
    transient: {stage: keys of the blocks whose values the backward never reads}
    (`transient_blocks`): their value parameters are ("transient", stage, key, row shape)
    instead, arrays of rows by position in a level (`StageEmitter.transient`): one level's
    nodes for "forward", all of the stage's for "all".
    Raises Unsupported where a stage has a shape this does not emit."""
    emitters = {name: StageEmitter(stages[name], numpy_stages[name], lanes, cores) for name in ("leaf", "internal")}
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
            level_offsets = _arg("level_offsets", (L1,), "int32")
            params.append(("level_offsets",))
            placeholders, inputs, transposed_inputs = {}, {}, {}
            for name in ("leaf", "internal"):
                for key, te_buf in stages[name].placeholders.items():
                    if isinstance(key, ra.RecState):
                        continue
                    if key not in inputs:
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
            for emitter in emitters.values():
                for te_buf, state in emitter.state_of.items():
                    placeholders[te_buf] = states[state]
            per_stage = {}
            for name, emitter in emitters.items():
                rows, positions = Tb.int32(), Tb.int32()
                value, adj, transposed = {}, {}, {}
                for key, te_buf in emitter.transposed_reads().items():
                    if key not in transposed_inputs:
                        transposed_inputs[key] = _arg(key.name + "_T", key.shape[::-1], key.dtype)
                        params.append(("transposed", key))
                    transposed[te_buf] = transposed_inputs[key]
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
                                   "transposed": transposed, "gathered": gathered, "state": states}
            # the weights' gradients: every parameter comes before the first statement
            sums, dense = [], {}
            for name, first, last in (("leaf", 0, 1), ("internal", 1, L1 - 1)):
                for block, stand_in, reads in weight_reads[name]:
                    for ordinal, (load, coeff, axes) in enumerate(reads):
                        shape = tuple(int(ext) for _, ext in axes)
                        out = _arg(f"grad_{name}_{block.out.name}_{ordinal}", shape, "float32")
                        params.append(("weight_read", name, block.key, ordinal, shape,
                                       emitters[name].weight_of(load.source), index_arrays(load, axes)))
                        sums.append((name, first, last, block, stand_in, load, coeff, axes, out))
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
            leaves = (level_offsets[0], level_offsets[1] - level_offsets[0])
            if part == "all":
                # every node's values first (no recursion left: the states are known), then the levels
                emitters["leaf"].emit_recompute(per_stage["leaf"], *leaves, parallel)
                emitters["internal"].emit_recompute(per_stage["internal"], level_offsets[1],
                                                    level_offsets[L1 - 1] - level_offsets[1], parallel)
            elif part == "forward":
                # the leaves, then each level on the states of the one below
                emitters["leaf"].emit_recompute(per_stage["leaf"], *leaves, parallel, write_states=True)
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
                emitters["leaf"].emit_level(per_stage["leaf"], *leaves, 0, parallel)
                # the gradients of the weights every level reads alike, over all of a stage's nodes
                for name, first, last, block, stand_in, load, coeff, axes, out in sums:
                    emit_weight_read(emitters[name], block, stand_in, load, coeff, axes, out, per_stage[name],
                                     level_offsets[first], level_offsets[last] - level_offsets[first])
                # the rows read through the node's input, added into the weight's gradient by the
                # input: serially, node after node (a word recurs; a fixed order, no atomics)
                for name, first, last in (("leaf", 0, 1), ("internal", 1, L1 - 1)):
                    for index, (block, load, node_input) in enumerate(emitters[name].gathered):
                        weight = emitters[name].weight_of(load.source)
                        _emit_add_rows(dense[weight], per_stage[name]["gathered"][index], inputs[node_input],
                                       level_offsets[first], level_offsets[last] - level_offsets[first], lanes)
    return fast_math.rewrite(ib.get()), params


def _state_rows(emitter, value: dict, states: dict, first_node) -> set:
    """Point the value arrays (`value`, key -> buffer) of the stage's blocks that make a
    state at the state's rows of the stage's nodes, from `first_node` on: one array holds both
    (`StageEmitter.state_blocks`).  Returns those states (a DeclBuffer each: after the last
    parameter)."""
    for state, key in emitter.state_blocks().items():
        row = value[key]
        value[key] = Tb.decl_buffer(row.shape, "float32", data=states[state].data,
                                    elem_offset=first_node * int(np.prod([int(d) for d in row.shape[1:]])))
    return set(emitter.state_blocks())


def _emit_add_rows(grad, rows, by, offset, count, lanes):
    """grad[by[offset + n], ...] += rows[n, ...] for n in range(count), in order."""
    shape = [int(d) for d in grad.shape[1:]]
    with Tb.serial(0, count) as n:
        at = Tb.bind(by[offset + n])

        def add(ix):
            vector_loop(shape[-1], lanes, lambda k: Tb.buffer_store(
                grad, grad[[at] + ix + [k]] + rows[[n] + ix + [k]], [at] + ix + [k]))
        if len(shape) == 1:
            add([])
        else:
            with Tb.grid(*shape[:-1]) as ix:
                add(as_list(ix))


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


class LevelPass:
    """The compiled level pass of one program for `target`, called where the numpy one would be
    (`Adjoint._vjp`): it adds into the blocks' adjoint arrays and the children's state adjoints.
    Three parts (`level_pass`): the training forward and the backward after it, built with
    the model, and the whole pass with its own recomputation, built the first time a backward
    comes without its forward's values; the serial twins, for batches with a shared node,
    likewise the first time one comes."""

    def __init__(self, stages: dict, numpy_stages: dict, program: ra.RecProgram, target):
        info = cpu_info(target)
        #: stage -> keys of the blocks whose values the forward keeps one level of only
        self.transient = transient_blocks(stages, numpy_stages, program, info.lanes, info.cores)
        self._build = lambda part, parallel: level_pass(stages, numpy_stages, program, info.lanes, parallel,
                                                        info.cores, part, self.transient)
        self.target, self.states, self.cores = target, list(program.states), info.cores
        #: stage -> {key of a block that makes a state: the state's index}: in "forward" and
        #: "backward" the block's value array is the state's rows (`level_pass`)
        self.state_values = {name: {key: self.states.index(state) for state, key in
                                    StageEmitter(stages[name], numpy_stages[name], info.lanes).state_blocks().items()}
                             for name in ("leaf", "internal")}
        (forward, self.params), (backward, _) = self._build("forward", True), self._build("backward", True)
        names = (NAMES["forward"][True], NAMES["backward"][True])
        executable = tvm.compile(tvm.IRModule(dict(zip(names, (forward, backward)))), target=target,
                                 tir_pipeline=tir_pipeline.NAME)
        self._functions = {("forward", True): executable[names[0]], ("backward", True): executable[names[1]]}
        #: stage -> keys of the blocks whose weight gradients the function computes (the numpy
        #: weight pass leaves them out)
        self.weight_blocks = {stage: {p[2] for p in self.params if p[0] in ("weight_read", "gathered")
                                      and p[1] == stage}
                              for stage in ("leaf", "internal")}
        #: stage -> the row shape of each block's arrays (block key -> shape)
        self._row_shapes = {stage: {p[2]: p[3] for p in self.params if p[0] == "adj" and p[1] == stage}
                            for stage in ("leaf", "internal")}
        #: (part, "parallel" or "serial"): the function the last call ran
        self.last_run = None
        self._arrays = threading.local()

    def forward_pays(self, lin) -> bool:
        """Whether the "forward" part beats the model's kernel followed by the recomputation on
        the batch `lin`: its levels split their nodes over the cores, while the kernel splits
        every level's columns, so a batch whose internal levels hold fewer than
        FORWARD_NODES_PER_CORE nodes per core on average runs the kernel (one SST tree averages
        1.0-3.6 internal nodes a level, 1.8 over the first 10: on 2 cores most take the kernel).
        TreeLSTM H=150 on Zen 4, 2 threads, in-process A/Bs, kernel over forward: batch 1
        0.6-1.3 (noisy), batch 3 1.1-1.8, batch 10 1.12-1.19."""
        internal = int(lin.level_offsets[-1] - lin.level_offsets[1])
        levels = max(1, len(lin.level_offsets) - 2)
        return internal >= FORWARD_NODES_PER_CORE * self.cores * levels

    def function(self, part: str, parallel: bool):
        if (part, parallel) not in self._functions:
            func, _ = self._build(part, parallel)
            name = NAMES[part][parallel]
            self._functions[(part, parallel)] = tvm.compile(tvm.IRModule({name: func}), target=self.target,
                                                            tir_pipeline=tir_pipeline.NAME)[name]
        return self._functions[(part, parallel)]

    def __call__(self, lin, states, weights, d_states, whole, part: str = "all", gradient=None) -> list:
        """part "all": recompute every block's value into `whole[stage].values` and run the
        levels, writing `whole[stage].adjoints` (each level zeroes its own rows, then adds into
        them) and adding into `d_states` (the children's rows: zeros from the caller) and into
        `gradient(weight)` (the gradient of a weight read through the node's input, zeros from
        the caller: an embedding's rows, by word); "backward": the same on the values a
        "forward" call left in `whole`; "forward": every block's value, level by level from the
        leaves, and each node's rows of `states` (zeros), d_states and gradient unused.
        Returns the weight reads summed here, [(weight, index arrays, the sums over the read's
        axes, a key for `adjoint._scatter_invariant`'s layout memo)] (empty for "forward")."""
        args, reads = [], []
        if d_states is None:                                  # the forward reads no adjoint
            d_states = states
        for position, param in enumerate(self.params):
            role = param[0]
            if role == "level_offsets":
                args.append(lin.level_offsets)
            elif role == "placeholder":
                key = param[1]
                if isinstance(key, ra.Weight):
                    args.append(weights[key.name])
                elif isinstance(key, ra.NodeInput):
                    args.append(lin.words)
                else:
                    args.append(getattr(lin, key))       # children, num_children
            elif role == "transposed":                        # read by the values' computation only
                weight = np.asarray(weights[param[1].name], np.float32)
                args.append(self._held(position, weight.shape[::-1]))
                if part != "backward":
                    np.copyto(args[-1], weight.T)
            elif role == "weight_read":
                _, stage, key, ordinal, shape, weight, index = param
                sums = self._held(position, shape)
                args.append(sums)
                if part != "forward":
                    zero(sums)                               # the function adds block by block
                    reads.append((weight, index, sums, (stage, key, ordinal)))
            elif role == "gathered":                          # (each level's nest zeroes its rows first)
                _, stage, _, weight, _ = param
                level = whole.get(stage)
                args.append(self._held_rows(position, level.size if level is not None else 0, weight.shape[1:]))
            elif role == "gathered_sum":                      # the forward leaves it alone
                weight = param[1]
                args.append(weights[weight.name] if part == "forward" else gradient(weight))
            elif role == "transient":                         # one level's rows ("forward"), or all
                _, stage, _, row_shape = param
                args.append(self._held_rows(position, _transient_rows(lin, stage, part), row_shape))
            elif role == "state":
                args.append(states[self.states.index(param[1])])
            elif role == "d_state":
                args.append(d_states[self.states.index(param[1])])
            else:
                _, stage, key, row_shape = param
                level = whole.get(stage)
                if level is None:                         # no node of this stage in the batch
                    args.append(np.zeros((0,) + row_shape, np.float32))
                else:
                    args.append(level.values[key] if role == "value" else level.adjoints[key])
        children = lin.children[lin.children != NULL_SLOT]
        # a DAG's node with two parents gets its adjoint from both: the backward runs serially;
        # the forward writes each node's own rows, and runs in parallel whatever the batch
        shared = part != "forward" and children.size > 0 and np.bincount(children).max() > 1
        self.function(part, not shared)(*args)
        self.last_run = (part, "serial" if shared else "parallel")
        return reads

    def saved_vectors(self, stage: str) -> int:
        """Floats per node of `stage` that the training forward keeps for the backward (its
        states, and the values of its blocks but the transient ones and those held in the
        state rows), over the largest state's size: the "vectors per node" of issue 20's
        memory bound (TreeLSTM: 7 per internal node, 5 per leaf)."""
        width = max(int(np.prod(s.shape)) for s in self.states)
        kept = sum(int(np.prod(s.shape)) for s in self.states)
        kept += sum(int(np.prod(p[3])) for p in self.params
                    if p[0] == "value" and p[1] == stage and p[2] not in self.state_values[stage])
        return kept // width

    def _held(self, position, shape) -> np.ndarray:
        """This thread's array for the parameter at `position`, kept between calls (no page
        faults on reuse)."""
        held = self._arrays.__dict__.setdefault("by_param", {})
        if position not in held or held[position].shape != tuple(shape):
            held[position] = np.empty(shape, np.float32)
        return held[position]

    def _held_rows(self, position, count, row_shape) -> np.ndarray:
        """The first `count` rows of this thread's array for the parameter at `position`."""
        return held_rows(self._arrays.__dict__.setdefault("by_param", {}), position, count, row_shape)

    def row_shapes(self, stage: str) -> dict:
        """The row shape of each block's arrays of `stage` (block key -> shape)."""
        return self._row_shapes[stage]


def _transient_rows(lin, stage: str, part: str) -> int:
    """Rows of a transient block's value array: the largest level of the stage for "forward"
    (one level at a time), every node of it for "all" (one pass over the stage), none for
    "backward" (which reads no transient value)."""
    sizes = np.diff(lin.level_offsets)
    mine = sizes[:1] if stage == "leaf" else sizes[1:]
    if part == "backward" or mine.size == 0:
        return 0
    return int(mine.max() if part == "forward" else mine.sum())
