"""IR walking helpers for the schedule tests."""
import tvm
import tvm_ffi


def blocks(node):
    found = []
    tvm_ffi.structural_walk(node, (tvm.s_tir.stmt.SBlock, found.append), order="pre")
    return found


def block_names(node):
    return [b.name_hint for b in blocks(node)]


def find_block(node, name):
    matches = [b for b in blocks(node) if b.name_hint == name]
    assert len(matches) == 1, (name, block_names(node))
    return matches[0]


def fors(node):
    found = []
    tvm_ffi.structural_walk(node, (tvm.tirx.For, found.append), order="pre")
    return found


def loops_around(func, name):
    """The For loops enclosing block `name`, outermost first."""
    out = []

    def visit(stmt, stack):
        if isinstance(stmt, tvm.tirx.For):
            stack = stack + [stmt]
        if isinstance(stmt, tvm.s_tir.stmt.SBlock) and stmt.name_hint == name:
            out.append(stack)
            return
        for child in _children(stmt):
            visit(child, stack)
    visit(func.body, [])
    assert len(out) == 1, (name, len(out))
    return out[0]


def bindings(loops):
    """(kind, extent, thread tag or None) of each loop, outermost first."""
    return [(l.kind, str(l.extent), None if l.thread_binding is None else l.thread_binding.thread_tag)
            for l in loops]


def _children(stmt):
    if isinstance(stmt, tvm.tirx.For):
        return [stmt.body]
    if isinstance(stmt, tvm.s_tir.stmt.SBlockRealize):
        return [stmt.block]
    if isinstance(stmt, tvm.s_tir.stmt.SBlock):
        return [stmt.body] + ([stmt.init] if stmt.init is not None else [])
    if isinstance(stmt, tvm.tirx.SeqStmt):
        return list(stmt.seq)
    if isinstance(stmt, tvm.tirx.IfThenElse):
        return [stmt.then_case] + ([stmt.else_case] if stmt.else_case is not None else [])
    body = getattr(stmt, "body", None)
    return [body] if isinstance(body, tvm.tirx.Stmt) else []


def loads(node, buffer_name=None):
    found = []
    tvm_ffi.structural_walk(node, (tvm.ir.TensorLoad, found.append), order="pre")
    return [ld for ld in found if buffer_name is None or ld.source.name == buffer_name]


def stores(node, buffer_name=None):
    found = []
    tvm_ffi.structural_walk(node, (tvm.tirx.BufferStore, found.append), order="pre")
    return [st for st in found if buffer_name is None or st.buffer.name == buffer_name]


def accesses(node, buffer_name):
    """Index lists of every load and store of `buffer_name`."""
    return [list(ld.indices) for ld in loads(node, buffer_name)] + \
        [list(st.indices) for st in stores(node, buffer_name)]


def alloc(func, name):
    found = [buf for b in blocks(func) for buf in b.alloc_buffers if buf.name == name]
    assert len(found) == 1, name
    return found[0]


def param(func, name):
    (p,) = [p for p in func.params if p.name == name]
    return p


def shape(buf):
    return tuple(int(d) if isinstance(d, tvm.tirx.IntImm) else d for d in buf.shape)


def var_names(node):
    found = []
    tvm_ffi.structural_walk(node, (tvm.tirx.Var, found.append), order="pre")
    return {v.name for v in found}


def calls(node, op_suffix):
    found = []
    tvm_ffi.structural_walk(node, (tvm.ir.Call, found.append), order="pre")
    return [c for c in found if getattr(c.op, "name", "").endswith(op_suffix)]


def loop_kinds(func, name):
    return [loop.kind for loop in loops_around(func, name)]


def is_level_offset_index(expr):
    """expr is `level_offsets[...] + position`."""
    return isinstance(expr, tvm.ir.prim.expr.Add) and isinstance(expr.a, tvm.ir.TensorLoad) \
        and expr.a.source.name == "level_offsets"


def reads_index_array(expr):
    return bool(loads(expr, "level_offsets") or loads(expr, "children"))


def trace_names(rs):
    return [s.primitive for s in rs.trace]
