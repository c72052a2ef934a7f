"""vectorize_block: the innermost output loop of an elementwise block split by lanes and vectorized."""
import pytest
import tvm

import cortex_tvm as ct

from .irutil import loops_around, trace_names

K = tvm.tirx.ForKind


def test_ir_before_and_after(fresh):
    rs = fresh("TreeLSTM").specialize_leaves()
    before = loops_around(rs.func, "internal_c")[1:]
    assert [l.kind for l in before] == [K.SERIAL, K.SERIAL] and int(before[1].extent) == 32
    assert rs.vectorize_block("internal_c") is rs
    loops = loops_around(rs.func, "internal_c")[1:]
    assert [l.kind for l in loops] == [K.SERIAL, K.SERIAL, K.VECTORIZED]
    assert [int(l.extent) for l in loops[1:]] == [2, 16]
    assert loops[0].extent.same_as(before[0].extent) or str(loops[0].extent) == str(before[0].extent)
    # other blocks untouched
    assert [l.kind for l in loops_around(rs.func, "internal_h")[1:]] == [K.SERIAL, K.SERIAL]
    rs.vectorize_block("leaf_h", lanes=8)
    loops = loops_around(rs.func, "leaf_h")
    assert [l.kind for l in loops] == [K.SERIAL, K.SERIAL, K.VECTORIZED] and int(loops[-1].extent) == 8
    assert trace_names(rs) == ["specialize_leaves", "vectorize_block", "vectorize_block"]
    assert rs.trace[1].args == {"block": "internal_c", "lanes": 16}


def test_preconditions(fresh):
    rs = fresh("TreeLSTM").specialize_leaves()
    for block in ("gates_sum", "leaf_gates_sum"):
        with pytest.raises(ct.ScheduleError, match=f"{block!r} is a reduction; use tile_gemm"):
            rs.vectorize_block(block)
    with pytest.raises(ct.ScheduleError, match="innermost extent 32 of 'internal_c' is not a multiple of 24"):
        rs.vectorize_block("internal_c", lanes=24)
    for bad in (0, -16):
        with pytest.raises(ct.ScheduleError, match="lanes must be a positive int"):
            rs.vectorize_block("internal_c", lanes=bad)
    for bad in (16.0, "16"):
        with pytest.raises(ct.ScheduleError, match="vectorize_block: argument 'lanes' must be int"):
            rs.vectorize_block("internal_c", lanes=bad)
    with pytest.raises(ct.ScheduleError, match="no block named 'nope'"):
        rs.vectorize_block("nope")
    with pytest.raises(ct.ScheduleError, match="argument 'block' must be str, got int 3"):
        rs.vectorize_block(3)
    assert trace_names(rs) == ["specialize_leaves"]
    rs.vectorize_block("internal_c")
    with pytest.raises(ct.ScheduleError, match="'internal_c' is already transformed"):
        rs.vectorize_block("internal_c")


@pytest.mark.parametrize("name", ["TreeLSTM", "TreeFC"])
def test_same_numbers(check_numbers, make_model, name):
    def recipe(rs):
        rs.specialize_leaves()
        for block in rs.block_names():
            try:
                rs.vectorize_block(block)
            except ct.ScheduleError:
                pass                       # reductions
        assert any(s.primitive == "vectorize_block" for s in rs.trace)
    check_numbers(name, recipe)
    # the unspecialized program's select blocks vectorize too
    check_numbers(name, lambda rs: rs.vectorize_block("h_select"))
