"""The lowered PrimFunc's shape: its stage blocks, the serial level loop, the node loops bounded by
level_offsets, the scratchpads indexed by node id, the roots gather; with and without leaves apart."""
import numpy as np
import pytest
import tvm
import tvm_ffi

import cortex_tvm as ct

from schedule.irutil import block_names, blocks, find_block, fors
from schedule.irutil import loads as loads_of

from .common import FC_PLAIN_PARAMS, LSTM_PLAIN_PARAMS, H, V


def outer_for_of(func, block_name):
    """The For loop whose body contains the block `block_name` (innermost such loop)."""
    candidates = [f for f in fors(func.body) if block_name in block_names(f.body)]
    assert candidates, block_name
    return candidates[-1]


@pytest.mark.parametrize("which", ["lstm", "fc"])
def test_stage_blocks_exist(which, lstm_lowered, fc_lowered):
    func = (lstm_lowered if which == "lstm" else fc_lowered).func
    assert isinstance(func, tvm.tirx.PrimFunc)
    names = block_names(func.body)
    for name in ("leaves", "level", "roots"):
        assert names.count(name) == 1, names
    assert names.index("leaves") < names.index("level") < names.index("roots")
    text = func.script()
    for name in ("leaves", "level", "roots"):
        assert f'T.sblock("{name}")' in text


def _level_binding(func):
    """(level loop, the expression its "level" block binds the level to)."""
    level_loop = outer_for_of(func, "level")
    realize = level_loop.body
    assert isinstance(realize, tvm.s_tir.stmt.SBlockRealize) and realize.block.name_hint == "level"
    (binding,) = realize.iter_values
    return level_loop, binding


def _num_levels_minus(extent):
    """k when `extent` is `num_levels_plus_1 - k`."""
    assert isinstance(extent, tvm.ir.prim.expr.Sub), extent
    assert isinstance(extent.a, tvm.tirx.Var) and extent.a.name == "num_levels_plus_1", extent
    return int(extent.b)


def test_level_loop_is_serial_over_levels(lstm_lowered):
    func = lstm_lowered.func
    level_loop, binding = _level_binding(func)
    assert level_loop.kind == tvm.tirx.ForKind.SERIAL
    # the loop counts from 0 (so s_tir can split it); its block computes level l + 1
    # (level 0 = leaves), and there are L - 1 internal levels
    assert int(level_loop.min) == 0
    assert _num_levels_minus(level_loop.extent) == 2
    assert isinstance(binding, tvm.ir.prim.expr.Add) and binding.a.same_as(level_loop.loop_var)
    assert int(binding.b) == 1
    assert lstm_lowered.first_level == 1 and lstm_lowered.specialized
    # the leaves block is not inside it, the level block is
    assert "leaves" not in block_names(level_loop.body)
    assert block_names(level_loop.body)[0] == "level"
    # the level index is opaque: levels must run in order
    level = find_block(func.body, "level")
    assert [iv.iter_type for iv in level.iter_vars] == [tvm.tirx.IterVar.Opaque]


@pytest.mark.parametrize("which", ["lstm", "fc"])
def test_plain_program_has_no_leaves_block(which, lstm_plain, fc_plain):
    lowered = lstm_plain if which == "lstm" else fc_plain
    func = lowered.func
    assert not lowered.specialized and lowered.first_level == 0
    names = block_names(func.body)
    assert "leaves" not in names
    assert names.count("level") == 1 and names.count("roots") == 1
    # the level loop covers every level, leaves included: it computes level l itself
    level_loop, binding = _level_binding(func)
    assert level_loop.kind == tvm.tirx.ForKind.SERIAL
    assert int(level_loop.min) == 0
    assert _num_levels_minus(level_loop.extent) == 1
    assert binding.same_as(level_loop.loop_var)
    # both cases are computed in the level; each state's new value is a select
    states = ["h", "c"] if which == "lstm" else ["h"]
    level = find_block(func.body, "level")
    inner = block_names(level.body)
    assert inner[-len(states):] == [f"{s}_select" for s in states]
    assert "leaf_h" in inner and "internal_h" in inner
    for state in states:
        select = find_block(level.body, f"{state}_select")
        store = select.body
        assert isinstance(store, tvm.tirx.BufferStore) and store.buffer.name == state
        call = store.value
        assert isinstance(call, tvm.ir.Call) and call.op.name.endswith("if_then_else"), call
        cond = call.args[0]
        # num_children[level_offsets[l] + j] == 0
        assert isinstance(cond, tvm.ir.prim.expr.EQ) and int(cond.b) == 0, cond
        assert isinstance(cond.a, tvm.ir.TensorLoad) and cond.a.source.name == "num_children"
        (index,) = cond.a.indices
        assert isinstance(index, tvm.ir.prim.expr.Add)
        assert isinstance(index.a, tvm.ir.TensorLoad) and index.a.source.name == "level_offsets"
        assert index.a.indices[0].same_as(level.iter_vars[0].var)
        assert loads_of(call.args[1], "leaf_" + state) and loads_of(call.args[2], "internal_" + state)
    assert lowered.uses_num_children
    assert lowered.params == (LSTM_PLAIN_PARAMS if which == "lstm" else FC_PLAIN_PARAMS)
    assert [p.name for p in func.params] == lowered.params


def test_lower_defaults_to_unspecialized():
    model = ct.models.TreeFC(hidden_size=16, vocab_size=V)
    lowered = model.lower()
    assert not lowered.specialized
    assert "leaves" not in block_names(lowered.func.body)
    # the two defaults differ on purpose (Model.lower: where a schedule starts; lower.lower: leaves apart)
    assert ct.lower.lower(model.program).specialized


def test_node_loops_read_level_offsets(lstm_lowered):
    func = lstm_lowered.func
    level = find_block(func.body, "level")
    inner = [b for b in blocks(level.body) if b.name_hint != "level"]
    assert [b.name_hint for b in inner] == ["gates_sum", "gates", "internal_c", "internal_h"]
    node_loops = [f for f in fors(level.body) if loads_of(f.extent, "level_offsets")]
    # one data-dependent node loop per compute, extent level_offsets[l + 1] - level_offsets[l]
    assert len(node_loops) == len(inner)
    for loop in node_loops:
        assert len(loads_of(loop.extent, "level_offsets")) == 2
        assert loop.kind == tvm.tirx.ForKind.SERIAL
    # all other loops have constant extents
    for loop in fors(level.body):
        if loop not in node_loops:
            assert isinstance(loop.extent, tvm.tirx.IntImm)
    # the leaves' node loops read level_offsets[0] and [1]
    leaves = find_block(func.body, "leaves")
    leaf_loops = [f for f in fors(leaves.body) if loads_of(f.extent, "level_offsets")]
    assert len(leaf_loops) == 4
    for loop in leaf_loops:
        idx = sorted(int(ld.indices[0]) for ld in loads_of(loop.extent, "level_offsets"))
        assert idx == [0, 1]


def test_scratchpads_are_indexed_by_node_id(lstm_lowered):
    level = find_block(lstm_lowered.func.body, "level")
    assert {b.name for b in level.alloc_buffers} == {"gates_sum", "gates"}
    for buf in level.alloc_buffers:
        # one row per slot (node id), as in CORTEX's ILIR
        assert isinstance(buf.shape[0], tvm.tirx.Var) and buf.shape[0].name == "num_slots"
        assert int(np.prod([int(d) for d in buf.shape[1:]])) == 5 * H     # one node's gates
        # every access is buf[level_offsets[l] + j, r]
        accesses = loads_of(level.body, buf.name)
        stores = []
        tvm_ffi.structural_walk(level.body, (tvm.tirx.BufferStore, stores.append), order="pre")
        indices = [ld.indices[0] for ld in accesses] + [st.indices[0] for st in stores if st.buffer.name == buf.name]
        assert len(indices) >= 2
        for first in indices:
            assert isinstance(first, tvm.ir.prim.expr.Add), first
            assert isinstance(first.a, tvm.ir.TensorLoad) and first.a.source.name == "level_offsets"
    rs = ct.RecSchedule(lstm_lowered)
    assert sorted(rs.scratchpads()) == ["gates", "gates_sum", "leaf_gates", "leaf_gates_sum"]


def test_roots_block_gathers_first_state(lstm_lowered):
    roots = find_block(lstm_lowered.func.body, "roots")
    store = roots.body
    assert isinstance(store, tvm.tirx.BufferStore) and store.buffer.name == "out", type(store)
    assert loads_of(store.value, "h") and not loads_of(store.value, "c")
    assert loads_of(store.value, "roots")
