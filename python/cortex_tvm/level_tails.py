"""The TIR rewrites behind `RecSchedule.level_tails`: a level's last nodes in a tile of their own.

A register tile of t nodes computes t nodes.  Padding every level to a multiple of
t (`pad_levels`) keeps the tile free of bounds checks, but a level of one node then
costs a tile of t: on a chain of one-node levels (TreeLSTM H=256, Zen 5, t=5) a
level took 16-18 us padded, 13 us here.  Here the levels are not padded.  Every
stage of a level runs over its whole tiles, `size // t * t` nodes, then a copy of
the stage for each remainder r in 1..t-1 runs over the last r nodes, its node loop
a constant r (so its tile, r nodes, needs no bounds check either), guarded by
`size % t == r`: one copy runs per level, and none when the level is whole tiles.

Three steps, each a function here:
- `split` (before scheduling): the stages in a block `<scope>_whole`, each
  remainder's copies in a block `<scope>_tail<r>` whose predicate is the guard
  (blocks `<block>_tail<r>`, scratchpads of their own of r rows, indexed by the
  node's place in the tail: dense and of constant size from the start).  Blocks of their own:
  s_tir schedules only a scope that is a stage pipeline.  A stage without a node loop over whole tiles is not copied.
- `node_set` names which copy a block belongs to (0: the whole tiles): stages of
  different copies touch different nodes of the level, so they are independent.
- `join_tails` (when the schedule is finalized): the blocks open; stage k of each
  copy follows stage k of the whole tiles, under its guard (inside a serial
  stage's outer loop, around a parallel one), and a parallel one joins the
  parallel loop before it when the two have the same constant extent, so the
  copies share the whole tiles' fork and join instead of adding their own.
"""
from __future__ import annotations

import re

import tvm
import tvm_ffi
from tvm import tirx

from . import tir_rewrites

SCOPES = ("leaves", "level")
#: the kernel attribute that has `tir_pipeline` lower it without StorageRewrite
SEPARATE_TILES = "cortex_tvm.separate_tiles"
_TAIL = re.compile(r"_tail(\d+)(?:_init|_update)?$")


def tail_name(block: str, remainder: int) -> str:
    return f"{block}_tail{remainder}"


def copied_from(block: str) -> str:
    """The block a remainder's copy (`tail_name`) was made from; `block` itself for any other."""
    m = re.fullmatch(r"(.+)_tail\d+", block)
    return m.group(1) if m else block


def node_set(block: str) -> int:
    """0 for a block of the whole tiles, r for one of the copy that takes a remainder of r nodes."""
    m = _TAIL.search(block)
    return int(m.group(1)) if m else 0


def _nest(stage):
    """(the perfect loop nest's Fors outermost first, its SBlockRealize) or None."""
    loops = []
    s = stage
    while isinstance(s, tirx.For):
        loops.append(s)
        s = s.body
    if not loops or not isinstance(s, tvm.s_tir.stmt.SBlockRealize):
        return None
    return loops, s


def is_tail_base(e) -> bool:
    """Whether `e` is where a tail starts in its level, `(lo[l + 1] - lo[l]) // t * t`."""
    return (isinstance(e, tvm.ir.prim.expr.Mul) and isinstance(e.a, tvm.ir.prim.expr.FloorDiv)
            and tir_rewrites.is_level_size(e.a.a) and isinstance(e.b, tirx.IntImm))


def _whole_tiles(extent, multiple: int) -> bool:
    """Whether `extent` is `(lo[l + 1] - lo[l]) // multiple * multiple` (pad_level_extents' form)."""
    return is_tail_base(extent) and extent.b.value == multiple


def _map_vars(stmt, mapping: dict):
    return tvm_ffi.structural_map(stmt, (tvm.ir.Var, lambda v: mapping.get(v, v)), order="post")


def _copy(stage, remainder: int, multiple: int, scratchpads: dict):
    """The stage's copy for the last `remainder` nodes of a level, or None when it has no node loop.

    `scratchpads` maps each of the scope's scratchpad buffers to the copy's own."""
    nest = _nest(stage)
    if nest is None or not _whole_tiles(nest[0][0].extent, multiple):
        return None
    loops, realize = nest
    whole = loops[0].extent                                  # the nodes before the tail
    size = whole.a.a
    block = realize.block
    node = block.iter_vars[0].var
    shifted = whole + node                                   # the node's position in its level

    def on_load(ld):
        new = scratchpads.get(ld.source)
        return ld if new is None else tirx.BufferLoad(new, [_unshift(ld.indices[0], shifted)] + list(ld.indices[1:]))

    def on_store(st):
        new = scratchpads.get(st.buffer)
        return st if new is None else tirx.BufferStore(new, st.value, [_unshift(st.indices[0], shifted)]
                                                       + list(st.indices[1:]))

    def on_region(r):
        new = scratchpads.get(r.source)
        if new is None:
            return r
        first = r.region[0]
        return tirx.BufferRegion(new, [tvm.ir.Range.from_min_extent(_unshift(first.min, shifted), first.extent)]
                                 + list(r.region[1:]))

    def moved(x):
        x = _map_vars(x, {node: shifted})
        return tvm_ffi.structural_map(x, [(tvm.ir.TensorLoad, on_load), (tirx.BufferStore, on_store),
                                          (tvm.ir.TensorRegion, on_region)], order="post")

    fresh = {v: tirx.Var(v.name, v.ty) for v in _defined_vars(stage)}
    # a constant r nodes: the tile of r nodes needs no bounds check
    iter_vars = [tirx.IterVar(tvm.ir.Range.from_min_extent(0, remainder) if i == 0 else iv.dom, iv.var,
                              iv.iter_type, iv.thread_tag) for i, iv in enumerate(block.iter_vars)]
    new_block = tvm.s_tir.stmt.SBlock(
        iter_vars, [moved(r) for r in block.reads], [moved(w) for w in block.writes],
        tail_name(block.name_hint, remainder), moved(block.body), None if block.init is None else moved(block.init),
        block.alloc_buffers, block.match_buffers, block.annotations)
    stmt = tvm.s_tir.stmt.SBlockRealize(realize.iter_values, realize.predicate, new_block)
    for i, lp in reversed(list(enumerate(loops))):
        stmt = tirx.For(lp.loop_var, lp.min, remainder if i == 0 else lp.extent, lp.kind, stmt,
                        lp.thread_binding, lp.annotations)
    return _map_vars(stmt, fresh)


def _defined_vars(stage) -> list:
    """The variables `stage` binds (loops, block iterators, lets): a copy needs its own."""
    found = []
    tvm_ffi.structural_walk(stage, [(tirx.For, lambda f: found.append(f.loop_var)),
                                    (tvm.s_tir.stmt.SBlock, lambda b: found.extend(iv.var for iv in b.iter_vars)),
                                    ((tirx.Let, tirx.LetStmt), lambda e: found.append(e.var))])
    return list({id(v): v for v in found}.values())


def _unshift(index, shifted):
    """A scratchpad row `lo[l] + (whole + j)` of the copy becomes `j`: the copy's own r rows,
    dense from the start (no dense_index needed, a constant size)."""
    if isinstance(index, tvm.ir.prim.expr.Add) and index.b.same_as(shifted):
        return shifted.b
    raise ValueError(f"level_tails: a scratchpad is accessed at {index}, not at level_offsets[l] + position")


def whole_name(scope: str) -> str:
    return f"{scope}_whole"


def is_part(scope: str, name: str) -> bool:
    """Whether block `name` is one of the blocks `split` divides `scope` into."""
    return name == whole_name(scope) or bool(re.fullmatch(re.escape(scope) + r"_tail\d+", name))


def split(func, multiple: int):
    """Each scope (the leaves, a level; node loops over whole tiles already, see
    `tir_rewrites.pad_level_extents`) divided into a block of its stages, `<scope>_whole`, and one
    block per remainder r, `<scope>_tail<r>`, holding their copies.  Blocks of their own,
    because s_tir schedules only a scope that is a stage pipeline: within one, a stage that
    writes a state another stage has read (the tail's epilogue after the whole tiles') is a
    write-after-read, and TVM cannot prove which stage covers what an epilogue reads."""
    def on_block(b):
        if b.name_hint not in SCOPES:
            return b
        stages = list(b.body.seq) if isinstance(b.body, tirx.SeqStmt) else [b.body]
        parts = []
        for r in range(1, multiple):
            copies = {buf: tirx.decl_buffer([r] + list(buf.shape[1:]), buf.dtype, name=tail_name(buf.name, r))
                      for buf in b.alloc_buffers}
            tails = [(stage, t) for stage, t in ((st, _copy(st, r, multiple, copies)) for st in stages)
                     if t is not None]
            if tails:
                parts.append(_scope(tail_name(b.name_hint, r), [t for _, t in tails], list(copies.values()),
                                    _guard(tails[0][0], multiple, r)))
        if not parts:
            return b
        parts.insert(0, _scope(whole_name(b.name_hint), stages, list(b.alloc_buffers)))
        return tvm.s_tir.stmt.SBlock(b.iter_vars, b.reads, b.writes, b.name_hint, tirx.SeqStmt(parts),
                                     b.init, [], b.match_buffers, b.annotations)
    return tvm_ffi.structural_map(func, (tvm.s_tir.stmt.SBlock, on_block), order="post")


def _guard(stage, multiple: int, remainder: int):
    """`(lo[l + 1] - lo[l]) % multiple == remainder`, for a stage of whole tiles."""
    return tirx.EQ(tirx.floormod(_nest(stage)[0][0].extent.a.a, multiple), remainder)


def _scope(name, stages, allocs, guard=None):
    """An opaque block around a tail's stages, run when `guard` holds (the level leaves its
    remainder): it reads what they read from outside and writes what they write outside (the
    states), each whole."""
    reads, writes = {}, {}

    def on_block(blk):
        for r in blk.reads:
            reads.setdefault(r.source.name, r.source)
        for w in blk.writes:
            writes.setdefault(w.source.name, w.source)
    body = tirx.SeqStmt(stages) if len(stages) > 1 else stages[0]
    tvm_ffi.structural_walk(body, (tvm.s_tir.stmt.SBlock, on_block))
    inside = {a.name for a in allocs}
    whole = [tir_rewrites.whole_region(buf) for n, buf in reads.items() if n not in inside and n not in writes]
    written = [tir_rewrites.whole_region(buf) for n, buf in writes.items() if n not in inside]
    block = tvm.s_tir.stmt.SBlock([], whole, written, name, body, None, allocs, [], {})
    return tvm.s_tir.stmt.SBlockRealize([], tirx.IntImm("bool", 1) if guard is None else guard, block)


def _realizes(stmt) -> list:
    found = []
    tvm_ffi.structural_walk(stmt, (tvm.s_tir.stmt.SBlockRealize, lambda r: found.append(r)))
    return found


def _sets(stage) -> set:
    return {node_set(r.block.name_hint) for r in _realizes(stage)}


def _joinable(before, stage) -> bool:
    return (isinstance(before, tirx.For) and isinstance(stage, tirx.For)
            and before.kind == tirx.ForKind.PARALLEL and stage.kind == tirx.ForKind.PARALLEL
            and isinstance(before.extent, tirx.IntImm) and isinstance(stage.extent, tirx.IntImm)
            and before.extent.value == stage.extent.value and not _sets(before) & _sets(stage))


def _always(pred) -> bool:
    return isinstance(pred, tirx.IntImm) and bool(pred.value)


def _guarded(stage, guard):
    """The stage run when `guard` holds: a serial stage tests it inside its outer loop; a
    parallel one under the test, so that a level without this tail forks no threads for it."""
    if guard is None:
        return stage
    if isinstance(stage, tirx.For) and stage.kind != tirx.ForKind.PARALLEL:
        return tirx.For(stage.loop_var, stage.min, stage.extent, stage.kind, tirx.IfThenElse(guard, stage.body, None),
                        stage.thread_binding, stage.annotations)
    return tirx.IfThenElse(guard, stage, None)


def _join(before, stage, guard):
    """`for p in parallel(n): A(p)` and a tail's `for q in parallel(n): B(q)` as
    `for p in parallel(n): A(p); if guard: B(p)`."""
    body = tirx.IfThenElse(guard, _map_vars(stage.body, {stage.loop_var: before.loop_var}), None)
    seq = list(before.body.seq) if isinstance(before.body, tirx.SeqStmt) else [before.body]
    return tirx.For(before.loop_var, before.min, before.extent, before.kind, tirx.SeqStmt(seq + [body]),
                    before.thread_binding, before.annotations)


def join_tails(func):
    """In the leaves and each level: the tails' blocks opened and their stages interleaved with
    the whole tiles' (stage k of every copy together: they touch different nodes, so any order
    of them computes the same), each parallel one joined into the parallel loop before it when
    the extents are equal.  Run when no s_tir primitive follows (the scope is no longer a stage
    pipeline)."""
    def on_block(b):
        if b.name_hint not in SCOPES:
            return b
        stages = list(b.body.seq) if isinstance(b.body, tirx.SeqStmt) else [b.body]
        parts = [s for s in stages if isinstance(s, tvm.s_tir.stmt.SBlockRealize)
                 and is_part(b.name_hint, s.block.name_hint)]
        if not parts or len(parts) != len(stages):
            return b
        groups = [list(p.block.body.seq) if isinstance(p.block.body, tirx.SeqStmt) else [p.block.body]
                  for p in parts]
        guards = [None if _always(p.predicate) else p.predicate for p in parts]
        whole = groups[0]
        allocs = list(b.alloc_buffers) + [a for p in parts for a in p.block.alloc_buffers]
        if len({len(g) for g in groups}) != 1:         # copies of another shape: in order
            out = [_guarded(s, guard) for g, guard in zip(groups, guards) for s in g]
        else:
            out = []
            for k in range(len(whole)):
                for g, guard in zip(groups, guards):
                    if guard is not None and _joinable(out[-1], g[k]):
                        out[-1] = _join(out[-1], g[k], guard)
                    else:
                        out.append(_guarded(g[k], guard))
        return tvm.s_tir.stmt.SBlock(b.iter_vars, b.reads, b.writes, b.name_hint,
                                     tirx.SeqStmt(out) if len(out) > 1 else out[0], b.init,
                                     allocs, b.match_buffers, b.annotations)
    joined = tvm_ffi.structural_map(func, (tvm.s_tir.stmt.SBlock, on_block), order="post")
    # StorageRewrite would fold the tails' tiles and the whole tiles' into one stack array (tir_pipeline)
    return joined.with_attr(SEPARATE_TILES, True)
