"""The compiled level pass of one program (`LevelPass`): its functions built for a target,
their arguments laid out from a batch and this thread's kept arrays, and called where the
numpy level pass would be (`adjoint.Adjoint`).  The functions themselves: `adjoint_kernel`.
"""
from __future__ import annotations

import collections
import threading

import numpy as np
import tvm

from . import amx_bf16, ra
from .adjoint_emit import StageEmitter
from .adjoint_kernel import NAMES, level_pass, transient_blocks
from .adjoint_nest import tile_vectors
from .compile_cache import build_functions
from .linearize import NULL_SLOT
from .node_features import check_slot_rows
from .scratch import aligned_zeros, held_rows, zero
from .stage_numpy import reads_in_order
from .target import cpu_info

#: `level_pass`'s lanes for a GPU build: unused by its nests, which put elements on threads
GPU_LANES = 8
#: the leaf_sources of a layout whose every leaf is computed (`distinct_leaves`)
_NO_REPEATS = tvm.runtime.tensor(np.zeros(0, np.int32))   # (numpy gives a size-0 array strides TVM refuses)


class LevelPass:
    """The compiled level pass of one program for `target`, called where the numpy one would be
    (`Adjoint._vjp`): it adds into the blocks' adjoint arrays and the children's state adjoints.
    Three parts (`level_pass`): the training forward and the backward after it, built with
    the model, and the whole pass with its own recomputation, built the first time a backward
    comes without its forward's values; the serial twins, for batches with a shared node,
    likewise the first time one comes."""

    def __init__(self, stages: dict, numpy_stages: dict, program: ra.RecProgram, target, bf16: bool = False):
        gpu = target.kind.name == "cuda"
        #: whether the contractions take bfloat16 products (`adjoint_bf16`)
        self.bf16 = bf16
        #: whether their whole tiles run on AMX tiles (`adjoint_amx`): bf16 on a CPU with AMX-BF16
        self.amx = bf16 and not gpu and amx_bf16.has_feature(target)
        # (a GPU's levels put each node on a thread block: the forward pays from one node a level)
        info = None if gpu else cpu_info(target)
        lanes, cores = (GPU_LANES, 1) if gpu else (info.lanes, info.cores)
        self._vectors = 1 if gpu else tile_vectors(info)
        #: stage -> keys of the blocks whose values the forward keeps one level of only
        self.transient = transient_blocks(stages, numpy_stages, program, lanes, cores)
        self._stages, self._program, self._gpu = (stages, numpy_stages), program, gpu
        self._lanes = lanes
        self.target, self.states, self.cores = target, list(program.states), cores
        #: the GPU the functions run on (arrays copied there and back), or None: the host
        self.device = tvm.cuda(0) if gpu else None
        #: stage -> {key of a block that makes a state: the state's index}: in "forward" and
        #: "backward" the block's value array is the state's rows (`level_pass`)
        self.state_values = {name: {key: self.states.index(state) for state, key in
                                    StageEmitter(stages[name], numpy_stages[name], lanes).state_blocks().items()}
                             for name in ("leaf", "internal")}
        (forward, self.params), (backward, _) = self.build("forward", True), self.build("backward", True)
        names = (NAMES["forward"][True], NAMES["backward"][True])
        built = build_functions(dict(zip(names, (forward, backward))), target)      # (at once, cached)
        self._functions = {("forward", True): built[names[0]], ("backward", True): built[names[1]]}
        #: stage -> keys of the blocks whose weight gradients the function computes (the numpy
        #: weight pass leaves them out)
        self.weight_blocks = {stage: {p[2] for p in self.params if p[0] in ("weight_read", "gathered")
                                      and p[1] == stage}
                              for stage in ("leaf", "internal")}
        #: stage -> the row shape of each block's arrays (block key -> shape)
        self._row_shapes = {stage: {p[2]: p[3] for p in self.params if p[0] == "adj" and p[1] == stage}
                            for stage in ("leaf", "internal")}
        #: positions of the weight sums that are their weight's gradient as they stand (`_in_place`)
        self.in_place = _in_place(self.params)
        #: (part, "parallel" or "serial"): the function the last call ran
        self.last_run = None
        self._arrays = threading.local()

    def build(self, part: str, parallel: bool, gpu=None) -> tuple:
        """(PrimFunc, parameters) of `part` (`adjoint_kernel.level_pass`), laid out for the
        target (gpu=None), or for a GPU (True) or the CPU (False) whatever the target."""
        gpu = self._gpu if gpu is None else gpu
        return level_pass(*self._stages, self._program, self._lanes, parallel, self.cores, part, self.transient,
                          gpu=gpu, vectors=1 if gpu else self._vectors, bf16=self.bf16 and not gpu,
                          amx=self.amx and not gpu)

    def forward_pays(self, lin) -> bool:
        """Whether the "forward" part (store: every block's value kept) costs less than the
        model's kernel followed by the recomputation in the backward, on the batch `lin`.

        The cost is each path's node forwards on its busiest core, summed over the levels: the
        part splits each level's nodes over the cores, ceil(n / cores) (a core idles where a
        level has fewer nodes than cores); the kernel splits each level's columns, n / cores,
        and the recomputation then runs every node again, all levels at once, N / cores.  So
        the part pays where sum(ceil(n / cores)) <= 2 N / cores: on 1 or 2 cores always
        (sum(ceil(n / 2)) <= (N + levels) / 2 <= N); on 16 a single SST tree (1.0-3.6 internal nodes a level on average)
        takes the kernel, a batch of 25 the part.  Both paths also pay a fork and join per
        level, left out, and the kernel's better packed products, not counted.

        Zen 4, 2 threads, in-process A/Bs: the kernel and the recomputation took 1.01-1.16x the
        part's time at batch 1 and 1.24-1.35x at batch 25 (TreeLSTM H = 64, 150, 300, TreeFC,
        TreeGRU; docs/training.md)."""
        if self.cores <= 2:                 # (always, as above: no pass over the levels)
            return True
        sizes = np.diff(np.asarray(lin.level_offsets, np.int64))
        busiest = int(np.sum(-(-sizes // self.cores)))
        return busiest * self.cores <= 2 * int(sizes.sum())

    def function(self, part: str, parallel: bool):
        if (part, parallel) not in self._functions:
            func, _ = self.build(part, parallel)
            name = NAMES[part][parallel]
            self._functions[(part, parallel)] = build_functions({name: func}, self.target)[name]
        return self._functions[(part, parallel)]

    def __call__(self, lin, states, weights, d_states, whole, part: str = "all", gradient=None,
                 d_features=None, overwritten=None) -> list:
        """part "all": recompute every block's value into `whole[stage].values` and run the
        levels, writing `whole[stage].adjoints` (each level zeroes its own rows, then adds into
        them) and adding into `d_states` (the children's rows: zeros from the caller) and into
        `gradient(weight)` (the gradient of a weight read through the node's input, zeros from
        the caller: an embedding's rows, by word) and into `d_features` (the per-node features'
        adjoint, (num_slots, F) zeros from the caller, for a program that reads them);
        "backward": the same on the values a "forward" call left in `whole`; "forward": every
        block's value, level by level from the leaves, and each node's rows of `states` (zeros),
        d_states and gradient unused.  overwritten(weight): the weight's gradient array, not zeroed,
        or None; a sum that is its weight's whole gradient (`in_place`) is written there.
        Returns the other weight reads summed here, [(weight, index arrays, the sums over the read's
        axes, a key for `adjoint_numpy.scatter_invariant`'s layout memo)] (empty for "forward")."""
        args, reads, unread = [], [], set()
        if d_states is None:                                  # the forward reads no adjoint
            d_states = states
        for position, param in enumerate(self.params):
            role = param[0]
            if role == "level_offsets":
                args.append(lin.level_offsets)
            elif role == "leaf_sources":
                if lin.leaf_sources is not None and self.device is not None:
                    raise ValueError("the GPU level pass runs every leaf: a layout with repeated leaves "
                                     "(Adjoint.lay_out) is for the CPU's")
                args.append(_NO_REPEATS if lin.leaf_sources is None else lin.leaf_sources)
                unread.add(position)                          # (read only)
            elif role == "placeholder":
                key = param[1]
                if isinstance(key, ra.Weight):
                    args.append(weights[key.name])
                elif isinstance(key, ra.NodeInput):
                    args.append(lin.words)
                elif isinstance(key, ra.NodeFeatures):      # (a short array would be read past its end)
                    check_slot_rows(lin, key.name, key.size, key.dtype)
                    args.append(lin.features)
                else:
                    args.append(getattr(lin, key))       # children, num_children
            elif role == "transposed":                        # read by the values' computation only
                args.append(self._held(position, param[2], param[3]))    # (`adjoint_copies.Transposed`)
                if part != "backward" and self.device is not None:      # (a CPU pass transposes it; a GPU's plainly)
                    np.copyto(args[-1], np.asarray(weights[param[1].name], np.float32).T)
            elif role == "widened":                           # written by "forward" and "all", read by all
                args.append(self._held(position, param[2], param[3]))    # (`adjoint_copies.Widened`)
            elif role == "weight_read":
                _, stage, key, ordinal, shape, weight, index = param
                grad = (overwritten(weight) if part != "forward" and self.device is None and overwritten
                        and position in self.in_place else None)
                if grad is not None:            # the sum is the gradient: no zeroing, no add after
                    args.append(grad.reshape(shape))
                    continue
                sums = self._held(position, shape)
                args.append(sums)
                if part != "forward":
                    if self.device is not None:
                        zero(sums)          # (a CPU pass's first block of nodes starts the sums)
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
            elif role == "d_features":                      # the forward adds nothing into it
                args.append(lin.features if d_features is None else d_features)
                if d_features is None:
                    unread.add(position)
            elif role == "d_state":
                args.append(d_states[self.states.index(param[1])])
                if part == "forward":                 # (the states themselves: written as those)
                    unread.add(position)
            else:
                _, stage, key, row_shape = param
                level = whole.get(stage)
                if level is None:                         # no node of this stage in the batch
                    args.append(self._held_rows(position, 0, row_shape))
                else:
                    args.append(level.values[key] if role == "value" else level.adjoints[key])
                    if role == "value" and part != "all" and key in self.state_values[stage]:
                        unread.add(position)      # the function reads and writes the state's rows
        children = lin.children[lin.children != NULL_SLOT]
        # a DAG's node with two parents gets its adjoint from both: the backward runs serially;
        # the forward writes each node's own rows, and runs in parallel whatever the batch
        shared = part != "forward" and children.size > 0 and np.bincount(children).max() > 1
        if self.device is None:
            self.function(part, not shared)(*args)
        else:
            self._on_device(self.function(part, not shared), args, unread)
        self.last_run = (part, "serial" if shared else "parallel")
        return reads

    def _on_device(self, function, args, unread):
        """Run `function` on the GPU: every array copied there, and back once it returns (the
        adjoints, state adjoints, sums and gradients it wrote), but the parameters at the
        positions `unread`: the states again, or views of them, that the function reaches
        through the state arrays (copied back, their stale copies would overwrite what it
        wrote there)."""
        if not self.device.exist:
            raise RuntimeError("no CUDA device: this model's backward was compiled for target 'cuda' but no "
                               "GPU is visible to TVM (tvm.cuda(0).exist is False)")
        on_device = [tvm.runtime.tensor(array.numpy() if isinstance(array, tvm.runtime.Tensor) else
                                        np.ascontiguousarray(array), device=self.device) for array in args]
        function(*on_device)
        self.device.sync()
        for position, (array, copy) in enumerate(zip(args, on_device)):
            if position not in unread:
                array[...] = copy.numpy()

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

    def _held(self, position, shape, dtype="float32") -> np.ndarray:
        """This thread's array for the parameter at `position`, kept between calls (no page
        faults on reuse), zeros when made, starting on a cache line (`scratch.aligned_zeros`)."""
        held = self._arrays.__dict__.setdefault("by_param", {})
        if position not in held or held[position].shape != tuple(shape):
            held[position] = aligned_zeros(shape).view(dtype)
        return held[position]

    def _held_rows(self, position, count, row_shape) -> np.ndarray:
        """The first `count` rows of this thread's array for the parameter at `position`."""
        return held_rows(self._arrays.__dict__.setdefault("by_param", {}), position, count, row_shape)

    def row_shapes(self, stage: str) -> dict:
        """The row shape of each block's arrays of `stage` (block key -> shape)."""
        return self._row_shapes[stage]


def _in_place(params) -> frozenset:
    """Positions of the "weight_read" parameters whose sums are their weight's gradient element for
    element, in order (TreeLSTM's dU, `(5H, 2, H)` over U's `(5H, 2H)`), and whose weight no other
    parameter sums into: the function can write its sums into the gradient itself, where the
    caller would zero a gradient and add them (`adjoint_numpy.scatter_invariant`'s "all").  The
    sums start from the first block of nodes (`adjoint_weights`), so every element is written."""
    writers = collections.Counter(p[5].name if p[0] == "weight_read" else p[3].name if p[0] == "gathered"
                                  else p[1].name for p in params
                                  if p[0] in ("weight_read", "gathered", "gathered_sum"))
    found = set()
    for position, param in enumerate(params):
        if param[0] != "weight_read" or writers[param[5].name] != 1:
            continue
        shape, weight, index = param[4], param[5], param[6]
        # (the sums' own shape must be the read's, or they would not lie in the gradient's order)
        if np.broadcast_shapes(*(i.shape for i in index)) == tuple(shape) and reads_in_order(index, weight.shape):
            found.add(position)
    return frozenset(found)


def _transient_rows(lin, stage: str, part: str) -> int:
    """Rows of a transient block's value array: the largest level of the stage for "forward"
    (one level at a time), every node of it for "all" (one pass over the stage), none for
    "backward" (which reads no transient value)."""
    sizes = np.diff(lin.level_offsets)
    mine = sizes[:1] if stage == "leaf" else sizes[1:]
    if part == "backward" or mine.size == 0:
        return 0
    return int(mine.max() if part == "forward" else mine.sum())
