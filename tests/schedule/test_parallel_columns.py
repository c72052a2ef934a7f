"""parallel_columns: the column tiles of every tiled block reading a packed weight run in parallel."""
import json

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
    assert rs.parallel_columns("U") is rs
    # the level loop stays serial; the column-tile loop just inside the level is parallel
    loops = loops_around(rs.func, "gates_sum")
    assert loops[0].kind == K.SERIAL
    assert loops[1].kind == K.PARALLEL and int(loops[1].extent) == column_tiles(rs, "gates_sum")
    assert all(l.kind != K.PARALLEL for l in loops[2:])
    # the bias add computed in the tile shares the parallel loop
    assert loops_around(rs.func, "gates")[1].same_as(loops[1])
    # blocks reading other weights are not touched
    assert all(l.kind != K.PARALLEL for l in loops_around(rs.func, "leaf_gates_sum"))
    rs.parallel_columns("W")
    leaf = loops_around(rs.func, "leaf_gates_sum")
    assert leaf[0].kind == K.PARALLEL and int(leaf[0].extent) == column_tiles(rs, "leaf_gates_sum")
    assert sum(l.kind == K.PARALLEL for l in leaf) == 1
    assert trace_names(rs)[-2:] == ["parallel_columns", "parallel_columns"]
    assert rs.trace[-1].args == {"weight": "W"}


def test_tree_fc(fresh):
    rs = fresh("TreeFC").specialize_leaves().pack("W", axis=0, tile=16)
    rs.tile_gemm("internal_h_sum", node_tile=2, column_tile=16, lanes=8)
    rs.parallel_columns("W")
    loops = loops_around(rs.func, "internal_h_sum")
    assert [l.kind for l in loops].count(K.PARALLEL) == 1
    assert loops[1].kind == K.PARALLEL and int(loops[1].extent) == 2


def test_preconditions(fresh):
    rs = fresh("TreeLSTM").specialize_leaves()
    with pytest.raises(ct.ScheduleError, match="pack 'U' first"):
        rs.parallel_columns("U")
    with pytest.raises(ct.ScheduleError, match="pack 'h' first"):
        rs.parallel_columns("h")
    rs.pack("U", axis=0, tile=32)
    with pytest.raises(ct.ScheduleError, match="no tiled block reads 'U'; apply tile_gemm first"):
        rs.parallel_columns("U")
    # a tiled block that does not read the weight does not count
    rs.pack("W", axis=0, tile=32)
    rs.tile_gemm("leaf_gates_sum", column_tile=32)
    with pytest.raises(ct.ScheduleError, match="no tiled block reads 'U'"):
        rs.parallel_columns("U")
    assert trace_names(rs)[-1] == "tile_gemm"


def test_same_numbers(check_numbers, batches):
    parallel = check_numbers("TreeLSTM", lambda rs: (prefix(rs), rs.parallel_columns("U"),
                                                     rs.parallel_columns("W")))
    serial = check_numbers("TreeLSTM", lambda rs: prefix(rs))
    for batch in batches:
        np.testing.assert_allclose(parallel(batch), serial(batch), atol=1e-6, rtol=0)


def test_persist_is_a_deprecated_alias(fresh):
    new = prefix(fresh("TreeLSTM")).parallel_columns("U")
    old = prefix(fresh("TreeLSTM"))
    with pytest.warns(DeprecationWarning, match="persist is deprecated; use parallel_columns"):
        assert old.persist("U") is old
    tvm.ir.assert_structural_equal(old.func, new.func)
    assert old.trace_json() == new.trace_json() and trace_names(old)[-1] == "parallel_columns"
    # a trace, recipe or tuning log written with the old name replays as the new primitive
    steps = [s if s["primitive"] != "parallel_columns" else {**s, "primitive": "persist"}
             for s in json.loads(new.trace_json())]
    replayed = fresh("TreeLSTM").replay(steps)
    tvm.ir.assert_structural_equal(replayed.func, new.func)
    assert replayed.trace_json() == new.trace_json()
    with pytest.warns(DeprecationWarning), pytest.raises(ct.ScheduleError, match="parallel_columns: pack 'U'"):
        fresh("TreeLSTM").persist("U")
