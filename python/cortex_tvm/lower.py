"""RA program -> one TIR PrimFunc (the ILIR of CORTEX).

The recursion becomes loops.  With leaf specialization (the default) a
`leaves` scope block computes every leaf at once; then a serial loop over
levels runs one `level` scope block per level, whose node loop has the
data-dependent extent `level_offsets[l + 1] - level_offsets[l]`; a `roots`
block gathers the first state of each tree's root.  Without specialization
the level loop starts at the leaves and every node computes both cases and
selects one with `num_children[n] == 0`.

Each stage body comes from TVM's own `te.create_prim_func` on the RA
computes, with node id = level start + position, spliced into the level loop.
Scratchpads (per-node intermediates) are indexed by node id, as in CORTEX's
ILIR: `gates[level_offsets[l] + j, r]`, `num_slots` rows.  The schedule
primitive `dense_index` turns that into `gates[j, r]` with one level's rows.

Lowering is two steps, `build_stage` (`te_stages.py`: a TE loop nest per stage: leaves and
one level of internal nodes, or one merged stage without leaf
specialization) and `assemble` (one PrimFunc: leaves, serial level loop,
roots gather); `lower(program, dump=print)` shows the IR after each.

The PrimFunc's parameters, in order (`Lowered.params` names them):
  node inputs (int32 (N,)), node features (float32 (N, F)), children (int32 (N, K)), [num_children (int32 (N,))],
  level_offsets (int32 (L+1,)), roots (int32 (B,)), max_level_size (int32 scalar),
  weights (in declaration order), states (N, *state_shape), out (B, *first_state_shape)
"""
from __future__ import annotations

from dataclasses import dataclass

import tvm
import tvm_ffi
from tvm import tirx
from tvm.script.ir_builder import IRBuilder
from tvm.script.ir_builder import tirx as Tb

from . import ra
from .signature import KernelSignature
from .te_stages import Stage, build_stage

from .plan import FUNC_NAME, TRANSFORM_FUNC  # noqa: F401 - the names the lowered module's functions get


@dataclass
class Lowered:
    """The lowered program: the IRModule plus what the runtime needs to call it."""

    mod: tvm.IRModule
    program: ra.RecProgram
    params: list              # parameter names in call order
    weights: list             # [ra.Weight] in parameter order
    node_inputs: list         # [ra.NodeInput] in parameter order
    uses_num_children: bool
    specialized: bool = True
    node_features: tuple = ()   # [ra.NodeFeatures] in parameter order

    @property
    def func(self) -> tirx.PrimFunc:
        return self.mod[FUNC_NAME]

    @property
    def first_level(self) -> int:
        """The first level the level loop computes (leaves are level 0)."""
        return 1 if self.specialized else 0

    @property
    def signature(self) -> KernelSignature:
        """The kernel's calling convention (see `cortex_tvm.signature`)."""
        return KernelSignature.of(self.program, self.weights, self.node_inputs, self.uses_num_children,
                                  self.specialized, self.node_features)


# ----------------------------------------------------------------------------- step 2: splice
def _rebase(stmt, rows: dict, hidden_reads: set, identity=frozenset()):
    """Rewrite accesses of stage buffers to function buffers.

    rows: te buffer -> (function buffer, row offset expr): element [j, ...] becomes
    [offset + j, ...].  hidden_reads: te buffers whose reads are dropped from block
    read regions: the recursive states read at children.  Those rows belong to
    earlier levels, so they carry no dependence inside a level, and listing them
    would make every block look like it reads what the level writes.
    identity: te buffers whose load `t[x]` becomes `x` (a table's row is its word).
    """
    def index(buf, idx):
        new_buf, off = rows[buf]
        return new_buf, [off + idx[0]] + list(idx[1:]) if off is not None else list(idx)

    def on_load(ld):
        if ld.source in identity:
            return ld.indices[0]
        if ld.source in rows:
            buf, idx = index(ld.source, ld.indices)
            return tirx.BufferLoad(buf, idx)
        return ld

    def on_store(st):
        if st.buffer in rows:
            buf, idx = index(st.buffer, st.indices)
            return tirx.BufferStore(buf, st.value, idx)
        return st

    def on_region(r):
        if r.source in rows:
            new_buf, off = rows[r.source]
            region = list(r.region)
            if off is not None:
                region[0] = tvm.ir.Range.from_min_extent(off + region[0].min, region[0].extent)
            return tirx.BufferRegion(new_buf, region)
        return r

    def on_block(b):
        reads = [r for r in b.reads if r.source not in hidden_reads]
        if len(reads) == len(b.reads):
            return b
        return tvm.s_tir.stmt.SBlock(b.iter_vars, reads, b.writes, b.name_hint, b.body, b.init,
                                     b.alloc_buffers, b.match_buffers, b.annotations)

    stmt = tvm_ffi.structural_map(stmt, [(tvm.s_tir.stmt.SBlock, on_block)], order="post")
    return tvm_ffi.structural_map(stmt, [(tvm.ir.TensorLoad, on_load), (tirx.BufferStore, on_store),
                                         (tvm.ir.TensorRegion, on_region)], order="post")


def _splice(stage: Stage, buffers: dict, level_start, level_end, num_slots, identity=()):
    """Add a stage's loop nest to the block being built, for nodes [level_start, level_end).

    identity: per-node inputs read as the node's own position (a table over the vocabulary).
    """
    rows, identity_bufs = {}, {stage.placeholders[k] for k in identity}
    for key, te_buf in stage.placeholders.items():
        if key not in identity:
            rows[te_buf] = (buffers[key], None)
    for state, te_buf in stage.outputs.items():
        rows[te_buf] = (buffers[state], level_start)
    for scratch in stage.func.body.block.alloc_buffers:   # indexed by node id (see dense_index)
        new = Tb.sblock_alloc_buffer([num_slots] + list(scratch.shape[1:]), scratch.dtype)
        IRBuilder.name(scratch.name, new)
        rows[scratch] = (new, level_start)
    hidden = {te_buf for key, te_buf in stage.placeholders.items() if isinstance(key, ra.RecState)}
    body = _rebase(stage.func.body.block.body, rows, hidden | identity_bufs, identity_bufs)
    size_var = _level_size_var(stage)
    variables = {stage.offset: level_start}
    if size_var is not None:
        variables[size_var] = level_end - level_start
    body = tvm_ffi.structural_map(body, (tvm.ir.Var, lambda v: variables.get(v, v)), order="post")
    Tb.add_to_parent(body)


def _level_size_var(stage: Stage):
    """The var create_prim_func made for the level size (the outputs' first dimension)."""
    first = next(iter(stage.outputs.values())).shape[0]
    return first if isinstance(first, tvm.ir.Var) else None


def _arg(name, shape, dtype):
    # align = element size: callers pass numpy arrays, which are not
    # 64-byte aligned, so the code must not use aligned vector loads
    return Tb.arg(name, Tb.buffer(shape, dtype, buffer_name=name, align=4))


def _whole(buf):
    return buf[tuple(slice(0, d) for d in buf.shape)]


def lower_tables(program: ra.RecProgram, word: ra.NodeInput, tables: dict) -> tirx.PrimFunc:
    """The leaf case of `program` for every value of `word`, as the transform function.

    tables: RecState -> the ra.Weight that holds its leaf value per word.  In a
    `tables` scope block, row w of each table is the leaf state of a leaf whose
    word is w: the leaf stage spliced over positions [0, word.bound) with
    `word[n]` read as n.  Its blocks are scheduled like any other.
    """
    stage = build_stage(program, "leaf")
    other = [k for k in stage.placeholders if not isinstance(k, ra.Weight) and k is not word]
    if other:
        raise ValueError(f"the leaf case reads {other} besides {word.name!r} and weights")
    inputs = sorted((k for k in stage.placeholders if isinstance(k, ra.Weight)), key=lambda w: w.order)
    with IRBuilder() as ib:
        with Tb.prim_func(s_tir=True):
            Tb.func_name(TRANSFORM_FUNC)
            Tb.func_attr({"tirx.noalias": True})
            buffers = {w: _arg(w.name, w.shape, w.dtype) for w in inputs}
            outputs = {s: _arg(t.name, t.shape, t.dtype) for s, t in tables.items()}
            with Tb.sblock("root"):
                with Tb.sblock("tables"):
                    Tb.reads(*[_whole(b) for b in buffers.values()])
                    Tb.writes(*[_whole(b) for b in outputs.values()])
                    rows = tirx.IntImm("int32", word.bound)
                    _splice(stage, {**buffers, **outputs}, tirx.IntImm("int32", 0), rows, rows, identity=(word,))
    return ib.get()


def assemble(program: ra.RecProgram, stages: dict) -> Lowered:
    """The whole inference as one PrimFunc: [leaves,] serial level loop, roots."""
    specialized = "leaf" in stages
    used = {}
    for stage in stages.values():
        used.update(stage.placeholders)
    node_inputs = [k for k in used if isinstance(k, ra.NodeInput)]
    features = [k for k in used if isinstance(k, ra.NodeFeatures)]
    if len(features) > 1:
        raise ValueError(f"the program reads {len(features)} node_features inputs "
                         f"({', '.join(f.name for f in features)}); one is supported: concatenate them")
    weights = sorted((k for k in used if isinstance(k, ra.Weight)), key=lambda w: w.order)
    uses_num_children = "num_children" in used
    K = program.spec.max_children
    out_state = program.states[0]

    with IRBuilder() as ib:
        with Tb.prim_func(s_tir=True):
            Tb.func_name(FUNC_NAME)
            Tb.func_attr({"tirx.noalias": True})
            N, L1, B = Tb.int32(), Tb.int32(), Tb.int32()
            IRBuilder.name("num_slots", N)
            IRBuilder.name("num_levels_plus_1", L1)
            IRBuilder.name("batch", B)

            buffers, params = {}, []
            for inp in node_inputs:
                buffers[inp] = _arg(inp.name, (N,), "int32")
                params.append(inp.name)
            for feat in features:
                buffers[feat] = _arg(feat.name, (N, feat.size), feat.dtype)
                params.append(feat.name)
            buffers["children"] = _arg("children", (N, K), "int32")
            params.append("children")
            if uses_num_children:
                buffers["num_children"] = _arg("num_children", (N,), "int32")
                params.append("num_children")
            level_offsets = _arg("level_offsets", (L1,), "int32")
            roots = _arg("roots", (B,), "int32")
            Tb.arg("max_level_size", Tb.int32())
            params += ["level_offsets", "roots", "max_level_size"]
            for w in weights:
                buffers[w] = _arg(w.name, w.shape, w.dtype)
                params.append(w.name)
            for s in program.states:
                buffers[s] = _arg(s.name, (N,) + s.shape, s.dtype)
                params.append(s.name)
            out = _arg("out", (B,) + out_state.shape, out_state.dtype)
            params.append("out")

            everything = [_whole(b) for b in buffers.values()]
            states = [_whole(buffers[s]) for s in program.states]
            with Tb.sblock("root"):
                if specialized:
                    with Tb.sblock("leaves"):
                        Tb.reads(*everything, level_offsets[0:L1])
                        Tb.writes(*states)
                        _splice(stages["leaf"], buffers, level_offsets[0], level_offsets[1], N)
                first = 1 if specialized else 0       # the loop starts at 0 so s_tir can split it
                with Tb.serial(0, L1 - 1 - first) as l:
                    with Tb.sblock("level"):
                        vl = Tb.axis.opaque(L1, l + first)
                        Tb.reads(*everything, level_offsets[0:L1])
                        Tb.writes(*states)
                        body = stages["internal" if specialized else "both"]
                        _splice(body, buffers, level_offsets[vl], level_offsets[vl + 1], N)
                with Tb.grid(B, *out_state.shape) as loops:
                    with Tb.sblock("roots"):
                        v = Tb.axis.remap("S" * len(loops), list(loops))
                        v = [v] if isinstance(v, tvm.ir.Var) else list(v)
                        Tb.buffer_store(out, buffers[out_state][tuple([roots[v[0]]] + v[1:])], v)
    func = ib.get()
    return Lowered(tvm.IRModule({FUNC_NAME: func}), program, params, weights, node_inputs,
                   uses_num_children, specialized, tuple(features))


# ----------------------------------------------------------------------------- the pipeline
def lower(program: ra.RecProgram, specialize_leaves: bool = True, dump=None, tables=None) -> Lowered:
    """Run the lowering steps; `dump(step_name, ir)` sees the IR after each.

    specialize_leaves defaults to True here (leaves in their own loop nest) and to False in
    `Model.lower` (the plain ILIR a schedule starts from, `RecSchedule.specialize_leaves()`
    specializing it); callers in the package pass it explicitly.

    tables: (unhoisted program, word input, {state: table weight}) when `program`'s
    leaves read tables (`hoist`): the module gets the transform function that fills them.
    """
    names = ("leaf", "internal") if specialize_leaves else ("both",)
    stages = {name: build_stage(program, name) for name in names}
    if dump:
        for name, stage in stages.items():
            dump(f"build_stages[{name}]", stage.func)
    lowered = assemble(program, stages)
    if dump:
        dump("assemble", lowered.func)
    if tables is not None:
        transform = lower_tables(*tables)
        lowered.mod = tvm.IRModule({FUNC_NAME: lowered.func, TRANSFORM_FUNC: transform})
        if dump:
            dump("lower_tables", transform)
    return lowered
