"""Small helpers for writing TIR with TVM's IRBuilder (`tvm.script.ir_builder.tirx`): the
backward's emitters (`adjoint_emit`, `adjoint_weights`) build their loop nests with them."""
from __future__ import annotations

import tvm
import tvm_ffi
from tvm.script.ir_builder import tirx as Tb


def vector_loop(extent, lanes, body):
    """body(k) for k in range(extent): vectors of `lanes` (T.vectorized), then the rest one by one.
    LLVM's own vectorizer leaves these loops scalar (their indices are not provably consecutive)."""
    extent = int(extent)
    whole = extent // lanes
    if whole:
        with Tb.grid(whole) as k_outer:
            with Tb.vectorized(0, lanes) as k_inner:
                body(k_outer * lanes + k_inner)
    if extent % lanes:
        with Tb.serial(0, extent % lanes) as k_rest:
            body(whole * lanes + k_rest)


def uses(e, var) -> bool:
    found = []
    tvm_ffi.structural_walk(e, (tvm.ir.Var, lambda v: found.append(v.same_as(var))), order="post")
    return any(found)


def as_list(loops):
    return [loops] if isinstance(loops, tvm.ir.Var) else list(loops)
