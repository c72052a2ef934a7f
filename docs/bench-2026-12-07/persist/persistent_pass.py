"""A probe, not package code: the training pass's level loops as one parallel region each (a TVM launch point, a
barrier after each parallel loop of a level) instead of a fork and join of the thread pool per parallel loop, the way
`RecSchedule.persistent_threads` makes the inference kernel's.  `persistent(func)` rewrites a built level-pass
PrimFunc: every serial loop whose body is parallel loops only (the forward's internal levels: the column-split
product, then the nodes' elementwise nests; the backward's levels: one loop of node runs) becomes the region.
Used by levers_ab.py's "persist" arm (../../bench-2026-12-06/intel-levers/levers_ab.py)."""
import tvm_ffi
from tvm import tirx
LAUNCH, BARRIER = "pragma_parallel_launch_point", "pragma_parallel_barrier_when_finish"
def _annot(f, kind=None, **extra):
    return tirx.For(f.loop_var, f.min, f.extent, kind if kind is not None else f.kind, f.body, f.thread_binding,
                    {**dict(f.annotations), **extra})
def _children(stmt):
    while isinstance(stmt, (tirx.LetStmt, tirx.AttrStmt)):
        stmt = stmt.body
    return list(stmt.seq) if isinstance(stmt, tirx.SeqStmt) else [stmt]
def persistent(func):
    def on_for(f):
        if f.kind != tirx.ForKind.SERIAL:
            return f
        kids = _children(f.body)
        if not kids or not all(isinstance(k, tirx.For) and k.kind == tirx.ForKind.PARALLEL for k in kids):
            return f
        def barrier_after(g):
            return _annot(g, **{BARRIER: 1}) if any(g.same_as(k) for k in kids) else g
        body = tvm_ffi.structural_map(f.body, (tirx.For, barrier_after), order="post")
        return tirx.For(f.loop_var, f.min, f.extent, f.kind, body, f.thread_binding, {**dict(f.annotations), LAUNCH: 1})
    new = func.with_body(tvm_ffi.structural_map(func.body, (tirx.For, on_for), order="post"))
    return new
