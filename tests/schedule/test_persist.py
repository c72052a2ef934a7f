"""persist: the column tiles of every tiled block reading a packed weight run in parallel."""
import numpy as np
import pytest
import tvm

import cortex_tvm as ct

from .irutil import loops_around, trace_names

K = tvm.tirx.ForKind


def prefix(rs, leaf=True):
    rs.specialize_leaves()
    rs.pack("U", axis=0, tile=32)
    rs.pack("W", axis=0, tile=32)
    rs.dense_index("gates_sum")
    rs.tile_gemm("gates_sum", node_tile=2, column_tile=32)
    if leaf:
        rs.tile_gemm("leaf_gates_sum", node_tile=2, column_tile=32)
    return rs


def column_tiles(rs, block):
    """Column extent of `block`'s output / 32."""
    cols = int(rs.sch.get(rs.sch.get_sblock(block)).writes[0].source.shape[-1])
    return cols // 32


def test_ir_before_and_after(fresh):
    rs = prefix(fresh("TreeLSTM"))
    assert all(l.kind != K.PARALLEL for l in loops_around(rs.func, "gates_sum"))
    assert rs.persist("U") is rs
    # the level loop stays serial; the column-tile loop just inside the level is parallel
    loops = loops_around(rs.func, "gates_sum")
    assert loops[0].kind == K.SERIAL
    assert loops[1].kind == K.PARALLEL and int(loops[1].extent) == column_tiles(rs, "gates_sum")
    assert all(l.kind != K.PARALLEL for l in loops[2:])
    # the bias add computed in the tile shares the parallel loop
    assert loops_around(rs.func, "gates")[1].same_as(loops[1])
    # blocks reading other weights are not touched
    assert all(l.kind != K.PARALLEL for l in loops_around(rs.func, "leaf_gates_sum"))
    rs.persist("W")
    leaf = loops_around(rs.func, "leaf_gates_sum")
    assert leaf[0].kind == K.PARALLEL and int(leaf[0].extent) == column_tiles(rs, "leaf_gates_sum")
    assert sum(l.kind == K.PARALLEL for l in leaf) == 1
    assert trace_names(rs)[-2:] == ["persist", "persist"]
    assert rs.trace[-1].args == {"weight": "W"}


def test_tree_fc(fresh):
    rs = fresh("TreeFC").specialize_leaves().pack("W", axis=0, tile=16)
    rs.tile_gemm("internal_h_sum", node_tile=2, column_tile=16, lanes=8)
    rs.persist("W")
    loops = loops_around(rs.func, "internal_h_sum")
    assert [l.kind for l in loops].count(K.PARALLEL) == 1
    assert loops[1].kind == K.PARALLEL and int(loops[1].extent) == 2


def test_preconditions(fresh):
    rs = fresh("TreeLSTM").specialize_leaves()
    with pytest.raises(ct.ScheduleError, match="pack 'U' first"):
        rs.persist("U")
    with pytest.raises(ct.ScheduleError, match="pack 'h' first"):
        rs.persist("h")
    rs.pack("U", axis=0, tile=32)
    with pytest.raises(ct.ScheduleError, match="no tiled block reads 'U'; apply tile_gemm first"):
        rs.persist("U")
    # a tiled block that does not read the weight does not count
    rs.pack("W", axis=0, tile=32)
    rs.tile_gemm("leaf_gates_sum", column_tile=32)
    with pytest.raises(ct.ScheduleError, match="no tiled block reads 'U'"):
        rs.persist("U")
    assert trace_names(rs)[-1] == "tile_gemm"


def test_same_numbers(check_numbers, batches):
    persisted = check_numbers("TreeLSTM", lambda rs: (prefix(rs), rs.persist("U"), rs.persist("W")))
    serial = check_numbers("TreeLSTM", lambda rs: prefix(rs))
    for batch in batches:
        np.testing.assert_allclose(persisted(batch), serial(batch), atol=1e-6, rtol=0)
