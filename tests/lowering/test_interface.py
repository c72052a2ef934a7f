"""The lowered program's interface: its parameters and weights, the lowering cache and dump hook,
RecSchedule's block names, compile errors and the build cache, and a raw call of the PrimFunc in
the documented parameter order."""
import numpy as np
import pytest
import tvm
import tvm_ffi

import cortex_tvm as ct
from cortex_tvm.data import random_trees

import reference as ref
from schedule.irutil import fors

from .common import FC_PARAMS, LSTM_PARAMS, TOL, V


def test_params_tree_lstm(lstm_lowered):
    assert lstm_lowered.params == LSTM_PARAMS
    assert len(lstm_lowered.func.params) == len(LSTM_PARAMS)
    assert not lstm_lowered.uses_num_children
    assert [w.name for w in lstm_lowered.weights] == ["emb", "W", "bW", "U", "bU"]


def test_params_tree_fc(fc_lowered):
    assert fc_lowered.params == FC_PARAMS
    assert len(fc_lowered.func.params) == len(FC_PARAMS)


@pytest.mark.parametrize("specialize, steps", [
    (True, ["build_stages[leaf]", "build_stages[internal]", "assemble"]),
    (False, ["build_stages[both]", "assemble"]),
])
def test_lower_is_cached_and_dump_sees_every_step(specialize, steps):
    model = ct.models.TreeFC(hidden_size=16, vocab_size=V)
    assert model.lower(specialize_leaves=specialize) is model.lower(specialize_leaves=specialize)
    assert model.lower(specialize_leaves=True) is not model.lower(specialize_leaves=False)
    seen = []
    lowered = model.lower(specialize_leaves=specialize, dump=lambda step, ir: seen.append((step, ir)))
    assert [s for s, _ in seen] == steps
    assert all(isinstance(ir, tvm.tirx.PrimFunc) for _, ir in seen)
    assert tvm_ffi.structural_equal(lowered.func, model.lower(specialize_leaves=specialize).func)


def test_rec_schedule_block_names(lstm_lowered, lstm_plain):
    rs = ct.RecSchedule(lstm_lowered)
    leaves = ["leaf_gates_sum", "leaf_gates", "leaf_c", "leaf_h"]
    level = ["gates_sum", "gates", "internal_c", "internal_h"]
    assert rs.block_names("leaves") == leaves
    assert rs.block_names("level") == level
    assert rs.block_names() == leaves + level
    assert rs.has_block("leaves") and rs.has_block("gates") and not rs.has_block("nope")
    with pytest.raises(ct.ScheduleError, match="no block named 'nope'"):
        rs.block_names("nope")
    # the unspecialized program: no leaves scope, everything inside "level"
    plain = ct.RecSchedule(lstm_plain)
    assert not plain.has_block("leaves")
    assert plain.block_names() == plain.block_names("level") == leaves + level + ["h_select", "c_select"]
    # forwarded primitives are recorded (queries are not)
    loops = rs.get_loops(rs.get_sblock("internal_h"))
    rs.split(loops[-1], [None, 8])
    assert [t.primitive for t in rs.trace] == ["s_tir.split"]
    assert "internal_h" in rs.show()
    # scheduling a copy leaves the lowered function alone
    assert len(fors(lstm_lowered.func.body)) < len(fors(rs.func.body))


def test_compile_errors():
    model = ct.models.TreeFC(hidden_size=16, vocab_size=V)
    with pytest.raises(ValueError, match="schedule"):
        model.compile(schedule="no-such-recipe")
    with pytest.raises(TypeError, match="schedule"):
        model.compile(schedule=3)
    with pytest.raises(ValueError, match="target"):
        model.compile(target="tpu")


def test_identical_models_compile_once():
    a = ct.models.TreeFC(hidden_size=16, vocab_size=V)
    b = ct.models.TreeFC(hidden_size=16, vocab_size=V, seed=5)
    a.compile()
    count = ct.compile_count()
    cb = b.compile()      # same IR, other weights: the build cache answers
    assert ct.compile_count() == count
    trees = random_trees(5, (1, 9), seed=0, vocab_size=V)
    np.testing.assert_allclose(cb(trees), ref.roots("TreeFC", trees, b.weights), atol=TOL, rtol=0)


@pytest.mark.parametrize("specialize", [True, False])
def test_raw_primfunc_call_in_documented_param_order(specialize):
    """Build the lowered PrimFunc with tvm directly and call it with arrays in `params` order."""
    model = ct.models.TreeFC(hidden_size=16, vocab_size=V)
    lowered = model.lower(specialize_leaves=specialize)
    exe = tvm.compile(lowered.mod, target="llvm")
    func = exe[ct.lower.FUNC_NAME]
    trees = random_trees(6, (1, 15), seed=9, vocab_size=V)
    lin = ct.linearize.linearize(trees, 2, vocab_size=V)
    h = np.zeros((lin.num_slots, 16), np.float32)
    out = np.zeros((len(trees), 16), np.float32)
    args = {"word": lin.words, "children": lin.children, "num_children": lin.num_children,
            "level_offsets": lin.level_offsets, "roots": lin.roots, "max_level_size": lin.max_level_size,
            "h": h, "out": out, **model.weights}
    assert ("num_children" in lowered.params) == (not specialize)
    func(*[np.ascontiguousarray(args[p]) if isinstance(args[p], np.ndarray) else args[p]
           for p in lowered.params])
    np.testing.assert_allclose(out, ref.roots("TreeFC", trees, model.weights), atol=TOL, rtol=0)
    assert not h[0].any(), "the null slot stays zero"
