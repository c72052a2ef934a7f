"""TIR rewrites for a GPU grid (called by `schedule/gpu.py`): node loops with a host-known
extent, and one persistent kernel whose blocks stride over the nodes with a grid-wide barrier
between stages.  Each returns a new PrimFunc: plain functions, not `tvm.transform` passes
(this module was `gpu_passes.py`)."""
from __future__ import annotations

import tvm
import tvm_ffi
from tvm import tirx


def _reads_level_offsets(expr) -> bool:
    found = []
    tvm_ffi.structural_walk(expr, (tvm.ir.TensorLoad, lambda ld: found.append(ld)
                                   if ld.source.name == "level_offsets" else None), order="post")
    return bool(found)


def _and_predicate(realize, guard):
    pred = realize.predicate
    new = guard if isinstance(pred, tirx.IntImm) and pred.value else tirx.And(pred, guard)
    return tvm.s_tir.stmt.SBlockRealize(realize.iter_values, new, realize.block)


def _guard_realizes(stmt, guard):
    return tvm_ffi.structural_map(stmt, (tvm.s_tir.stmt.SBlockRealize, lambda r: _and_predicate(r, guard)),
                                  order="post")


def bound_node_loops(func, scope: str, bound):
    """In scope block `scope`, node loops with a data-dependent extent get the host-known extent `bound`.

    `for j in range(lo[l+1] - lo[l])` becomes `for j in range(bound)` and every
    block under it gets the guard `T.where(j < lo[l+1] - lo[l])`.  A GPU grid
    needs this: its size is read on the host, where `level_offsets` (device
    memory) is not readable.  `bound` must be at least every level's size
    (`max_level_size` is).  Returns (new func, number of loops rewritten).
    """
    count = [0]

    def on_for(f):
        if isinstance(f.extent, tirx.IntImm) or not _reads_level_offsets(f.extent):
            return f
        count[0] += 1
        body = _guard_realizes(f.body, f.loop_var < f.extent)
        return tirx.For(f.loop_var, f.min, bound, f.kind, body, f.thread_binding, f.annotations)

    def on_block(b):
        if b.name_hint != scope:
            return b
        body = tvm_ffi.structural_map(b.body, (tirx.For, on_for), order="post")
        return tvm.s_tir.stmt.SBlock(b.iter_vars, b.reads, b.writes, b.name_hint, body, b.init,
                                     b.alloc_buffers, b.match_buffers, b.annotations)

    new = tvm_ffi.structural_map(func, (tvm.s_tir.stmt.SBlock, on_block), order="post")
    return new, count[0]


def persistent_kernel(func, blocks: int, sync_after=("leaves", "level")):
    """One persistent GPU kernel: every `blockIdx.x` loop becomes a grid-stride loop of a single grid.

    The root block's body is wrapped in `for bx in T.thread_binding(blocks,
    "blockIdx.x")`; each inner `for j in T.thread_binding(E, "blockIdx.x")`
    becomes `for j_o in range(ceildiv(E, blocks))` over nodes
    `j = j_o * blocks + bx` (guarded by `j < E`); a grid-wide barrier
    (`T.cuda.grid_sync()`, cooperative groups) ends the body of each block named
    in `sync_after` (the leaves, and each level inside the level loop).
    The function gets the cooperative-launch attribute.
    """
    bx = tirx.Var("bx", "int32")
    G = tirx.IntImm("int32", blocks)
    rewritten = [0]

    def on_for(f):
        if f.kind != tirx.ForKind.THREAD_BINDING or f.thread_binding is None \
                or f.thread_binding.thread_tag != "blockIdx.x":
            return f
        rewritten[0] += 1
        extent = f.extent
        jo = tirx.Var(f.loop_var.name + "_o", "int32")
        j = jo * G + bx
        body = tvm_ffi.structural_map(f.body, (tvm.ir.Var, lambda v: j if v.same_as(f.loop_var) else v),
                                      order="post")
        body = _guard_realizes(body, j < extent)
        return tirx.For(jo, 0, tirx.floordiv(extent + (blocks - 1), G), tirx.ForKind.SERIAL, body)

    def sync():
        return tirx.Evaluate(tirx.call_intrin("", "tirx.cuda.grid_sync"))

    def on_block(b):
        if b.name_hint not in sync_after:
            return b
        return tvm.s_tir.stmt.SBlock(b.iter_vars, b.reads, b.writes, b.name_hint,
                                     tirx.SeqStmt([b.body, sync()]), b.init,
                                     b.alloc_buffers, b.match_buffers, b.annotations)

    def rebind(r):
        # a block with iterators may not read outer loop vars in its body: give the level
        # block an opaque iterator bound to bx and read that instead
        if r.block.name_hint not in sync_after or not r.block.iter_vars:
            return r
        b = r.block
        vbx = tirx.Var("v_bx", "int32")
        sub = tvm_ffi.structural_map(b.body, (tvm.ir.Var, lambda v: vbx if v.same_as(bx) else v), order="post")
        iv = tirx.IterVar(tvm.ir.Range(0, G), vbx, tirx.IterVar.Opaque)
        nb = tvm.s_tir.stmt.SBlock(list(b.iter_vars) + [iv], b.reads, b.writes, b.name_hint, sub, b.init,
                                   b.alloc_buffers, b.match_buffers, b.annotations)
        return tvm.s_tir.stmt.SBlockRealize(list(r.iter_values) + [bx], r.predicate, nb)

    body = tvm_ffi.structural_map(func.body, (tirx.For, on_for), order="post")
    body = tvm_ffi.structural_map(body, (tvm.s_tir.stmt.SBlockRealize, rebind), order="post")
    if not rewritten[0]:
        raise ValueError("persistent_kernel: no loop is bound to blockIdx.x")
    body = tvm_ffi.structural_map(body, (tvm.s_tir.stmt.SBlock, on_block), order="post")
    root = body.block
    iv = tirx.IterVar(tvm.ir.Range(0, G), bx, tirx.IterVar.ThreadIndex, "blockIdx.x")
    grid = tirx.For(bx, 0, G, tirx.ForKind.THREAD_BINDING, root.body, iv)
    root = tvm.s_tir.stmt.SBlock(root.iter_vars, root.reads, root.writes, root.name_hint, grid, root.init,
                                 root.alloc_buffers, root.match_buffers, root.annotations)
    new = tirx.PrimFunc(list(func.params), tvm.s_tir.stmt.SBlockRealize(body.iter_values, body.predicate, root),
                        attrs=func.attrs)
    return new.with_attr("tirx.kernel_launch_params",
                         ["blockIdx.x", "threadIdx.x", "tirx.use_cooperative_launch"])
