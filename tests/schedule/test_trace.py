"""The trace: JSON/Python forms, replay, and the s_tir passthrough."""
import json

import pytest
import tvm

import cortex_tvm as ct

from .irutil import trace_names


def lstm_steps(rs):
    rs.specialize_leaves()
    rs.fast_math()
    rs.pad_levels(2)
    rs.pack("U", axis=0, tile=32)
    rs.dense_index("gates_sum")
    rs.dense_index("gates")
    rs.tile_gemm("gates_sum", node_tile=2, column_tile=32, lanes=16, k_unroll=4)
    rs.parallel_columns("U")
    rs.vectorize_block("leaf_h")
    rs.unroll_levels(2)
    rs.dynamic_batch(True)
    return rs


def test_trace_json_round_trip(fresh):
    rs1 = lstm_steps(fresh("TreeLSTM"))
    text = rs1.trace_json()
    steps = json.loads(text)
    assert [s["primitive"] for s in steps] == trace_names(rs1)
    assert steps[0] == {"primitive": "specialize_leaves", "args": {}}
    rs2 = fresh("TreeLSTM").replay(text)
    tvm.ir.assert_structural_equal(rs1.func, rs2.func)
    assert rs2.plan == rs1.plan
    assert rs2.trace_json() == text
    # a list of dicts replays too, and so does the hoisting program step
    rs3 = fresh("TreeLSTM").replay(steps)
    tvm.ir.assert_structural_equal(rs1.func, rs3.func)
    rs4 = fresh("TreeFC").specialize_leaves().hoist()
    rs5 = fresh("TreeFC").replay(rs4.trace_json())
    tvm.ir.assert_structural_equal(rs4.func, rs5.func)
    assert rs5.plan.hoisted == rs4.plan.hoisted


def test_trace_python(fresh):
    rs1 = lstm_steps(fresh("TreeLSTM"))
    text = rs1.trace_python()
    lines = text.splitlines()
    assert lines[0] == "rs.specialize_leaves()"
    assert lines[1] == "rs.fast_math()"
    assert lines[2] == "rs.pad_levels(multiple=2)"
    assert lines[3].startswith("rs.pack(weight='U', axis=0, tile=32")
    assert lines[4] == "rs.dense_index(tensor='gates_sum')"
    assert "rs.unroll_levels(depth=2)" in lines
    # it is Python that does the same thing
    rs2 = fresh("TreeLSTM")
    exec(text, {"rs": rs2})
    tvm.ir.assert_structural_equal(rs1.func, rs2.func)


def test_s_tir_passthrough_is_recorded(fresh):
    rs = fresh("TreeFC").specialize_leaves()
    block = rs.get_sblock("child_sum")
    loops = rs.get_loops(block)
    assert len(loops) == 2
    outer, inner = rs.split(loops[1], [None, 8])
    rs.vectorize(inner)
    assert trace_names(rs) == ["specialize_leaves", "s_tir.split", "s_tir.vectorize"]   # queries are not recorded
    assert "T.vectorized(8)" in rs.show()
    assert rs.trace[1].args["args"].startswith("(")
    assert rs.trace_python().splitlines()[1].startswith("rs.s_tir.split(")
    with pytest.raises(ct.ScheduleError, match="s_tir.split was called with block/loop handles"):
        rs.trace_json()
    # errors from s_tir come back as ct.ScheduleError
    a = rs.get_loops(rs.get_sblock("internal_h"))
    b = rs.get_loops(rs.get_sblock("internal_h_sum"))
    with pytest.raises(ct.ScheduleError, match="reorder"):
        rs.reorder(a[1], b[0])
    with pytest.raises(ct.ScheduleError, match="parallel"):
        rs.parallel(b[2])                       # a reduction loop
    assert trace_names(rs) == ["specialize_leaves", "s_tir.split", "s_tir.vectorize"]
    # private names and the raw schedule are not forwarded
    with pytest.raises(AttributeError):
        rs._private_thing
    assert isinstance(rs.sch, tvm.s_tir.Schedule)
    # and the named primitives still apply on top
    rs.vectorize_block("internal_h")
    assert "s_tir.vectorize" in trace_names(rs) and trace_names(rs)[-1] == "vectorize_block"


def test_replay_errors(fresh):
    rs = fresh("TreeFC")
    with pytest.raises(ct.ScheduleError, match="unknown primitive 'no_such'"):
        rs.replay([{"primitive": "no_such"}])
    with pytest.raises(ct.ScheduleError, match="unknown primitive '_reset'"):
        rs.replay([{"primitive": "_reset", "args": {}}])
    with pytest.raises(ct.ScheduleError, match="step 0 is not"):
        rs.replay(["specialize_leaves"])
    with pytest.raises(ct.ScheduleError, match="args must be an object"):
        rs.replay([{"primitive": "fast_math", "args": [1]}])
    # a precondition failing inside replay is the primitive's own error
    with pytest.raises(ct.ScheduleError, match="specialize_leaves\\(\\) first"):
        rs.replay('[{"primitive": "hoist"}]')
    assert not rs.trace


def test_schedule_error_is_value_error():
    assert issubclass(ct.ScheduleError, ValueError)


def test_staged_lower_schedule_build(batches):
    """model.lower() -> RecSchedule primitives -> rs.build(model) -> callable, hoisting included."""
    import numpy as np
    from reference import tree_lstm
    model = ct.models.TreeLSTM(hidden_size=32, vocab_size=VOCAB_FOR_TRACE)
    rs = ct.RecSchedule(model.lower(specialize_leaves=False))
    rs.specialize_leaves().hoist().fast_math().pad_levels(3).pack("U", tile=16, groups=5)
    rs.dense_index("gates_sum").dense_index("gates").tile_gemm("gates_sum", column_tile=16)
    compiled = rs.build(model)
    assert compiled.plan.hoisted and compiled.plan.node_tile == 3
    trees = ct.data.random_trees(12, (1, 30), seed=3, vocab_size=VOCAB_FOR_TRACE)
    weights = {k: np.array(v) for k, v in model.weights.items()}
    roots = np.stack([h[-1] for h in tree_lstm(trees, weights)[0]])      # a root is last in post-order
    np.testing.assert_allclose(compiled(trees), roots, atol=1e-4)


VOCAB_FOR_TRACE = 60
