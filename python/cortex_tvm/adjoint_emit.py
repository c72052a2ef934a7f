"""The backward's derivative rules and loop nests as TIR, for one stage of an RA program.

`StageEmitter` reads a stage (`lower.build_stage`: one block per tensor, a leading axis over a
level's nodes) and adds loop nests to a function being built (`adjoint_kernel.level_pass`):

* `emit_recompute`: every block's value for a range of nodes, into the block's value array;
* `emit_level`: one level's adjoints.  For each block, last first, and each read in its body of
  a stage tensor or a child's state (a *sink*; weights are not sinks here: `adjoint_weights`
  differentiates the node-independent ones with the same `partials` (`weight_sinks`), the
  numpy weight pass the rest), one nest adds ``adjoint(block) * d body / d read`` to the
  read's element, by the rules of `adjoint_numpy.py` (`partials`).

A level's nodes go in one run per core (`adjoint_runs.runs`), each in tiles of NODE_TILE, the
rest in tiles of 1, 2 and 4 (`adjoint_runs.Run`); each nest (`adjoint_nest.emit_nest`: sums
in register tiles) runs over all of the run's tiles before the next nest (a node's nests
depend only on its own earlier ones).

A shape this does not emit (a stage tensor read at another node's row, say) raises
`Unsupported`, and the numpy backward runs instead.
"""
from __future__ import annotations

import tvm
import tvm_ffi
from tvm import tirx
from tvm.script.ir_builder import tirx as Tb

from . import ra
from .adjoint_nest import POSITION, ROW, emit_nest, splits_columns
from .adjoint_runs import in_segments, runs
from .stage_numpy import sblocks
from .tir_builder import as_list, row_elements, uses, var_dtype


class Unsupported(Exception):
    """The stage has a shape the compiled level pass does not emit (the numpy one runs)."""


class _Block:
    """One block of a stage: its axes, what it writes, and its body (a sum's summand)."""

    def __init__(self, block, key):
        self.name, self.key = block.name_hint, key
        self.axes = [(iv.var, iv.dom.extent) for iv in block.iter_vars]
        store = block.body
        if not isinstance(store, tirx.BufferStore):
            raise Unsupported(f"block {self.name!r} is not a single store")
        self.out, self.out_indices = store.buffer, list(store.indices)
        value = store.value
        if any(iv.iter_type != 0 for iv in block.iter_vars):
            if not (isinstance(value, tirx.Add) and isinstance(value.a, tvm.ir.TensorLoad)
                    and value.a.source.same_as(store.buffer)):
                raise Unsupported(f"block {self.name!r} reduces with something other than a sum")
            value = value.b
        self.body = value
        self.position = next((v for v, ext in self.axes if not isinstance(ext, tvm.tirx.IntImm)), None)
        if self.position is None or not self.out_indices or not self.out_indices[0].same_as(self.position):
            raise Unsupported(f"block {self.name!r} does not write its node's row")

    def used_axes(self, indices) -> list:
        """The block's axes but the node's that some of `indices` read, (var, extent), in order."""
        return [(v, ext) for v, ext in self.axes
                if not v.same_as(self.position) and any(uses(i, v) for i in indices)]

    def summed_axes(self, used) -> list:
        """The block's axes but the node's and those of `used`: what a nest over `used` sums."""
        return [(v, ext) for v, ext in self.axes
                if not v.same_as(self.position) and not any(v.same_as(u) for u, _ in used)]


class StageEmitter:
    """The TIR for one stage's level: the stage (`lower.Stage`) and its numpy twin
    (`stage_numpy.StageNumpy`, whose block keys name the value and adjoint arrays)."""

    def __init__(self, stage, numpy_stage, lanes: int, shares: int = 1, vectors: int = 1, bf16: bool = False,
                 amx: bool = False):
        #: lanes: float32 lanes of a vector; shares: the runs a level's nodes are split into
        #: in a parallel loop (the cores); vectors: a register tile's vectors per row
        #: (`adjoint_nest.tile_vectors`); bf16: contractions over weights' pair copies on
        #: `vdpbf16ps` (`adjoint_bf16`); amx: their whole tiles on AMX tiles (`adjoint_amx`)
        self.stage, self.lanes, self.shares, self.vectors = stage, lanes, shares, vectors
        self.bf16, self.amx = bf16, bf16 and amx
        tir_blocks = list(sblocks(stage.func.body.block.body))
        if len(tir_blocks) != len(numpy_stage.blocks):
            raise Unsupported("the stage's blocks and their numpy reading differ")
        self.blocks = [_Block(b, nb.out) for b, nb in zip(tir_blocks, numpy_stage.blocks)]
        self.tensor_of = {block.out: block.key for block in self.blocks}    # output buffer -> its key
        self.state_of = {buf: key for key, buf in stage.placeholders.items() if isinstance(key, ra.RecState)}
        self.output_of = dict(stage.outputs)
        #: what `partials` differentiates into: the weights read alike by every node (True), or
        #: stage tensors, states and the `gathered` reads
        self.weight_sinks = False
        #: (block, read, node input) for each weight read through a node's input (`emb[word[offset
        #: + n], e]`, `gather_input`) whose adjoint rows the level pass writes, a row per node;
        #: filled by `adjoint_weights.weight_blocks` for the blocks whose weight gradients it takes
        self.gathered = []
        #: keys of the blocks whose values only later blocks of the same node read (the
        #: backward does not): their value arrays hold one level's nodes, indexed by position in
        #: the level (`adjoint_kernel.transient_blocks`)
        self.transient = set()
        #: states whose rows are the value arrays of the blocks that make them (`state_blocks`)
        self.state_values = set()
        self._positions = [block.position for block in self.blocks]

    def state_blocks(self) -> dict:
        """{state: key of the block that makes it} where the block's row is the state's row (same
        shape and dtype): one array, the state's rows of the stage's nodes, holds both."""
        found = {}
        for state, out_buf in self.output_of.items():
            key = self._tensor_key(out_buf)
            block = next((b for b in self.blocks if b.key == key), None)
            if (block is not None and key not in found.values() and str(block.out.dtype) == state.dtype
                    and tuple(int(d) for d in block.out.shape[1:]) == tuple(state.shape)):
                found[state] = key
        return found

    # -- what a read is (buffers compared with same_as: TVM objects hash by handle) -------------
    def _tensor_key(self, buf):
        return next((key for b, key in self.tensor_of.items() if b.same_as(buf)), None)

    def _state(self, buf):
        return next((state for b, state in self.state_of.items() if b.same_as(buf)), None)

    def _features(self, buf):
        return next((k for k, b in self.stage.placeholders.items() if isinstance(k, ra.NodeFeatures)
                     and b.same_as(buf)), None)

    def is_sink(self, load) -> bool:
        if not str(load.ty.dtype).startswith("float"):
            return False
        if self.weight_sinks:
            return self.weight_of(load.source) is not None and not self.reads_node(load)
        return (self._tensor_key(load.source) is not None or self._state(load.source) is not None
                or self._gathered_index(load) is not None or self._features(load.source) is not None)

    def reads_node(self, load) -> bool:
        """Whether the read's indices depend on the node (an embedding row by the node's word)."""
        return any(uses(i, p) for i in load.indices for p in self._positions)

    def gather_input(self, block, load):
        """The node input (`ra.NodeInput`) through which `load` reads its weight's rows when it
        has the form ``weight[input[offset + n], a, b, ..]`` (the rest plain axes over whole
        dimensions; an input some nodes lack, `NodeInput.missing`, clamped as `NodeInput.index`
        clamps it, to `NodeInput.last_row`), else None."""
        weight = self.weight_of(load.source)
        first = load.indices[0] if load.indices else None
        clamped = isinstance(first, tirx.Min) and isinstance(first.b, tirx.IntImm)
        first, last = (first.a, int(first.b.value)) if clamped else (first, None)
        if weight is None or not isinstance(first, tvm.ir.TensorLoad) or len(first.indices) != 1:
            return None
        node_input = next((k for k, b in self.stage.placeholders.items()
                           if isinstance(k, ra.NodeInput) and b.same_as(first.source)), None)
        if node_input is None or last != node_input.last_row or (clamped and last >= int(weight.shape[0])):
            return None
        at, offset, position = first.indices[0], self.stage.offset, block.position
        if not (isinstance(at, tirx.Add) and ((at.a.same_as(offset) and at.b.same_as(position))
                                              or (at.a.same_as(position) and at.b.same_as(offset)))):
            return None
        axes = [(v, ext) for v, ext in block.axes if not v.same_as(position)]
        for d, index in enumerate(load.indices[1:], start=1):
            extent = next((ext for v, ext in axes if v.same_as(index)), None)
            if extent is None or int(extent) != weight.shape[d] or any(
                    index.same_as(other) for other in load.indices[1:d]):
                return None
        return node_input

    def _gathered_index(self, load):
        return next((k for k, (_, g, _) in enumerate(self.gathered) if g.same_as(load)), None)

    def weight_of(self, buf):
        return next((k for k, b in self.stage.placeholders.items() if isinstance(k, ra.Weight)
                     and b.same_as(buf)), None)

    def has_sink(self, e) -> bool:
        found = []
        tvm_ffi.structural_walk(e, (tvm.ir.TensorLoad, lambda ld: found.append(self.is_sink(ld))), order="post")
        return any(found)

    # -- emitting --------------------------------------------------------------------------
    def emit_level(self, bufs, offset, size, row_base, parallel: bool):
        """Add the level's loop nests to the function being built: nodes [offset, offset + size),
        rows [row_base, row_base + size) of this stage's value and adjoint arrays (`tiles`)."""
        def adjoints(run):
            def add_state_adjoint(state, adj, row, node):            # the loss's adjoint, and the parents'
                Tb.buffer_store(adj, adj[row] + bufs["d_state"][state][node], row)

            def start(level):
                # the nests below add into the level's own rows of these, and no other level
                # writes them: zeroed here, while the rows are about to be used, rather than all
                # at once beforehand by the caller
                self._zero_rows(level, list(bufs["adj"].values()) + list(bufs["gathered"].values()))
                self._state_elements(level, bufs["adj"], add_state_adjoint)
            run.each(start)
            for block in reversed(self.blocks):
                if not self.has_sink(block.body):
                    continue
                adj_out = bufs["adj"][block.key][[ROW] + list(block.out_indices[1:])]
                # the body's value is the block's own tensor: a derivative of a call at the top (tanh
                # of a sum, say) reads it instead of computing the call again
                value = tirx.BufferLoad(block.out, [block.position] + list(block.out_indices[1:]))
                for load, coeff in self.partials(block.body, adj_out, (block.body, value)):
                    self._emit_sink(block, load, coeff, bufs, run)
        self._runs(offset, size, row_base, parallel, adjoints)

    def emit_recompute(self, bufs, offset, size, parallel: bool, row_base=0, write_states: bool = False):
        """Add the computation of every block's value for the stage's nodes [offset, offset +
        size) (rows row_base ..) to the function being built; no node waits for another.  A
        contraction with a large weight (`splits_columns`) runs on a share of its columns per
        core over all the nodes, so each core reads its part of the weight (measured at
        `adjoint_nest.SPLIT_WEIGHT_BYTES`; the backward's levels gained nothing that way and keep
        their runs of nodes).
        write_states: also write each node's states (its rows of the state arrays) from the
        blocks that make them, as the forward does."""
        def write_state(state, value, row, node):
            Tb.buffer_store(bufs["state"][state], value[row], node)
        # (a state whose rows are its block's value array is written with the value)
        in_segments(self.blocks, lambda block: splits_columns(self, block, block.out_indices, block.body),
                    (offset, size, row_base, parallel), self.shares, self._runs,
                    lambda run, group: [self._emit_value(block, bufs, run) for block in group],
                    after=None if not write_states else lambda run: run.each(
                        lambda level: self._state_elements(level, bufs["value"], write_state, self.state_values)))

    def _zero_rows(self, level, arrays):
        """Zero the rows of the level's nodes in each of `arrays` (rows, *row shape)."""
        zero = tirx.const(0.0, "float32")
        for buf in arrays:
            with level.nodes() as (row, _):
                self._elements([int(d) for d in buf.shape[1:]],
                               lambda ix, buf=buf, row=row: Tb.buffer_store(buf, zero, [row] + ix), vector=True)

    def _state_elements(self, level, arrays, body, skip=()):
        """body(state, the array of `arrays` of the block that makes the state, its element's
        index at the node's row, the state's element's index at the node) for every element of
        every state of the level's nodes but those in `skip`."""
        for state, out_buf in self.output_of.items():
            if state in skip:
                continue
            array = arrays[self._tensor_key(out_buf)]
            with level.nodes() as (row, node):
                self._elements(list(state.shape), lambda ix, state=state, array=array, row=row, node=node:
                               body(state, array, [row] + ix, [node] + ix))

    # -- how the nests are laid out on the machine (a GPU's: `adjoint_gpu.GpuStageEmitter`) -----
    def _runs(self, offset, size, row_base, parallel: bool, body):
        """body(run) for the nodes [offset, offset + size): one run per core, in a parallel loop
        (or one serial run)."""
        runs(offset, size, row_base, parallel, self.shares if parallel else 1, body)

    def _nest(self, block, indices, coeff, bufs, run, write, skip_null=None):
        emit_nest(self, block, indices, coeff, bufs, run, write, skip_null)

    def _elements(self, shape, body, vector: bool = False):
        """body(index list) for every element of `shape`, the last axis in vectors of lanes if
        `vector`."""
        if not shape:
            body([])
        elif vector:
            row_elements(shape, self.lanes, body)
        else:
            with Tb.grid(*shape) as ix:
                body(as_list(ix))

    def partials(self, e, coeff, known=(None, None)):
        """(read, d(out)/d(read) * coeff) for every sink read under `e` (reverse mode, rule by rule).
        known: (an expression, a read of its value)."""
        if not self.has_sink(e):
            return
        if isinstance(e, tvm.ir.TensorLoad):
            yield e, coeff
        elif isinstance(e, tirx.Add):
            yield from self.partials(e.a, coeff)
            yield from self.partials(e.b, coeff)
        elif isinstance(e, tirx.Sub):
            yield from self.partials(e.a, coeff)
            yield from self.partials(e.b, -coeff)
        elif isinstance(e, tirx.Mul):
            yield from self.partials(e.a, coeff * e.b)
            yield from self.partials(e.b, coeff * e.a)
        elif isinstance(e, tirx.Div):
            yield from self.partials(e.a, coeff / e.b)
            yield from self.partials(e.b, -coeff * e.a / (e.b * e.b))
        elif isinstance(e, (tirx.Max, tirx.Min)):
            zero = tirx.const(0.0, var_dtype(coeff))
            pick_a = e.a >= e.b if isinstance(e, tirx.Max) else e.a <= e.b
            yield from self.partials(e.a, tirx.Select(pick_a, coeff, zero))
            yield from self.partials(e.b, tirx.Select(pick_a, zero, coeff))
        elif isinstance(e, tirx.Select) or (isinstance(e, tvm.ir.Call) and e.op.name.endswith(".if_then_else")):
            cond, then, other = (e.condition, e.true_value, e.false_value) if isinstance(e, tirx.Select) else e.args
            zero = tirx.const(0.0, var_dtype(coeff))
            yield from self.partials(then, tirx.Select(cond, coeff, zero))
            yield from self.partials(other, tirx.Select(cond, zero, coeff))
        elif isinstance(e, tvm.ir.Call) and e.op.name in _CALL_RULES:
            y = known[1] if known[0] is not None and e.same_as(known[0]) else e
            yield from self.partials(e.args[0], coeff * _derivative(e.op.name, y))
        elif isinstance(e, tirx.Cast) and str(e.dtype) == str(e.value.dtype):
            yield from self.partials(e.value, coeff)
        else:
            raise Unsupported(f"no compiled rule for {type(e).__name__} ({e})")

    def _emit_sink(self, block, load, coeff, bufs, run):
        """The adjoint of one read: `coeff` summed over the block's axes the read does not use,
        added to the read's element of its adjoint (a stage tensor's row, or a child's state
        row unless the child is the null node)."""
        key, state = self._tensor_key(load.source), self._state(load.source)
        gathered = self._gathered_index(load)

        def add_to(buf, row=True):
            """adds into `buf` where the read reads, in the node's row of `buf` if `row`"""
            def add(rewrite, value):
                idx = ([rewrite(ROW)] if row else [rewrite(load.indices[0])]) + [rewrite(i) for i in load.indices[1:]]
                Tb.buffer_store(buf, buf[idx] + value, idx)
            return add
        if gathered is not None:                  # the node's row of the weight's adjoint rows
            self._nest(block, load.indices, coeff, bufs, run, add_to(bufs["gathered"][gathered]))
            return
        features = self._features(load.source)
        if features is not None:                  # the node's own row of the features' adjoint
            if not uses(load.indices[0], block.position):
                raise Unsupported(f"block {block.name!r} reads the features {features.name} without its node")
            self._nest(block, load.indices, coeff, bufs, run, add_to(bufs["d_features"][features], row=False))
            return
        if key is not None:
            if not (load.indices and load.indices[0].same_as(block.position)):
                raise Unsupported(f"block {block.name!r} reads the stage tensor {load.source.name} at another node")
            self._nest(block, load.indices, coeff, bufs, run, add_to(bufs["adj"][key]))
            return
        if not any(uses(i, block.position) for i in load.indices):
            raise Unsupported(f"block {block.name!r} reads the state {load.source.name} without its node")
        # every missing child reads the null node: its adjoint is never read, and skipping it
        # keeps the parallel nodes from writing one row
        self._nest(block, load.indices, coeff, bufs, run, add_to(bufs["d_state"][state], row=False),
                   skip_null=load.indices[0])

    def _emit_value(self, block, bufs, run):
        """The block's value for the run's nodes, into its value array (the recomputation)."""
        def store(rewrite, value):
            buf = bufs["value"][block.key]
            first = POSITION if block.key in self.transient else ROW
            idx = [rewrite(first)] + [rewrite(i) for i in block.out_indices[1:]]
            Tb.buffer_store(buf, value, idx)
        self._nest(block, block.out_indices, block.body, bufs, run, store)

    def rewrite(self, e, bufs, mapping, offset, size, inner=None):
        """`e` (over the block's axes and the stage's buffers) in the function's terms: axes by
        `mapping` (with ROW: the node's row, POSITION: its position in the level), the level's
        offset, stage tensors by their value arrays' rows (a transient block's by position); a
        weight in `bufs["transposed"]` ((buffer, `adjoint_copies.Transposed`)) read with `inner` in its first
        index only, from its transpose; one in `bufs["widened"]` ((buffer, `adjoint_copies.Widened`)) read with
        `inner` in its last index only, as b * block + inner, from that copy."""
        row, position = mapping[ROW], mapping.get(POSITION)
        variables = {self.stage.offset: offset, self.stage.size: size}

        def on_var(v):
            for k, val in mapping.items():
                if v.same_as(k):
                    return val
            for k, val in variables.items():
                if v.same_as(k):
                    return val
            return v

        def on_load(ld):
            key = self._tensor_key(ld.source)
            if key is not None:
                first = position if key in self.transient else row
                return tirx.BufferLoad(bufs["value"][key], [first] + list(ld.indices[1:]))
            if inner is not None and len(ld.indices) == 2 and uses(ld.indices[0], inner) \
                    and not uses(ld.indices[1], inner):
                for k, (buf, layout) in bufs["transposed"].items():
                    if k.same_as(ld.source):
                        return layout.load(buf, ld.indices, inner)
            if inner is not None and len(ld.indices) == 2 and uses(ld.indices[1], inner) \
                    and not uses(ld.indices[0], inner):
                for k, (buf, layout) in bufs.get("widened", {}).items():
                    if k.same_as(ld.source):
                        if layout.covers(ld.indices, inner):
                            return layout.load(buf, ld.indices, inner)
                        break                        # (another form of read: the weight itself)
            for k, buf in bufs["placeholder"].items():
                if k.same_as(ld.source):
                    return tirx.BufferLoad(buf, list(ld.indices))
            return ld                                 # already the function's (level_offsets, an adjoint)

        # loads first, while their indices still name the block's axes (`inner`)
        e = tvm_ffi.structural_map(e, (tvm.ir.TensorLoad, on_load), order="post")
        return tvm_ffi.structural_map(e, (tvm.ir.Var, on_var), order="post")


#: d/dx f(x) in terms of y = f(x)
_CALL_RULES = {"tirx.sigmoid": lambda y: y * (tirx.const(1.0, "float32") - y),
               "tirx.tanh": lambda y: tirx.const(1.0, "float32") - y * y,
               "tirx.exp": lambda y: y}


def _derivative(op_name, y):
    """The call's derivative from its value `y`, computed once (a Let) where y is an expression."""
    if isinstance(y, (tvm.ir.TensorLoad, tirx.Var)):
        return _CALL_RULES[op_name](y)
    bound = tirx.Var("y", "float32")
    return tirx.Let(bound, y, _CALL_RULES[op_name](bound))
