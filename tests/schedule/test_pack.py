"""pack: W[r, c] -> W_packed[r // tile, c, r % tile] in the kernel; the transform function writes W_packed."""
import numpy as np
import pytest
import tvm

import cortex_tvm as ct
from cortex_tvm import tir_rewrites

from .irutil import find_block, loads, param, shape, stores, trace_names

H = 32


def test_ir_before_and_after(fresh):
    rs = fresh("TreeLSTM")
    assert shape(param(rs.func, "U")) == (5 * H, 2 * H)
    (before,) = loads(rs.func, "U")
    assert rs.transform_func is None
    assert rs.pack("U", axis=0, tile=32) is rs
    func = rs.func
    # the kernel reads the packed copy, which the parameter transform function writes
    assert "U" not in [p.name for p in func.params]
    assert shape(param(func, "U_packed")) == (5 * H // 32, 2 * H, 32)
    transform = rs.transform_func
    assert [p.name for p in transform.params] == ["U", "U_packed"]
    assert shape(param(transform, "U")) == (5 * H, 2 * H)
    (pack_store,) = [s for s in stores(transform) if s.buffer.name == "U_packed"]
    (pack_load,) = loads(transform, "U")
    a, c, b = pack_store.indices
    assert str(pack_load.indices[0]) == str(a * 32 + b) and str(pack_load.indices[1]) == str(c)
    (after,) = loads(func, "U_packed")
    r, k = before.indices
    # U[r, k] -> U[r // 32, k, r % 32]
    want = [tvm.tirx.floordiv(r, 32), k, tvm.tirx.floormod(r, 32)]
    assert len(after.indices) == 3
    block = find_block(func, "gates_sum")
    for got, w in zip(after.indices, want):
        # the block iterators were renamed by no one: compare structurally with free vars mapped
        assert str(got) == str(w), (got, w)
    assert loads(block, "U_packed")
    # the read region covers the whole packed buffer
    (region,) = [r for r in block.reads if r.source.name == "U_packed"]
    assert [int(x.extent) for x in region.region] == [5, 2 * H, 32]
    # other weights untouched
    assert shape(param(func, "W")) == (3 * H, H)
    assert [p[:3] for p in rs.plan.packs] == [("U", 0, 32)]
    assert trace_names(rs) == ["pack"]
    assert {k: rs.trace[0].args[k] for k in ("weight", "axis", "tile")} == {"weight": "U", "axis": 0, "tile": 32}


def test_pack_other_axis(fresh):
    rs = fresh("TreeLSTM").pack("U", axis=1, tile=16)
    assert shape(param(rs.func, "U_packed")) == (2 * H // 16, 5 * H, 16)
    rs.pack("W", axis=0, tile=96)
    assert shape(param(rs.func, "W_packed")) == (1, H, 96)
    assert [p.name for p in rs.transform_func.params] == ["W", "U", "U_packed", "W_packed"]
    assert [p[:3] for p in rs.plan.packs] == [("U", 1, 16), ("W", 0, 96)]


def test_preconditions(fresh):
    rs = fresh("TreeLSTM")
    with pytest.raises(ct.ScheduleError, match="tile 48 .*does not divide 'U'.shape\\[0\\] = 160"):
        rs.pack("U", axis=0, tile=48)
    for tile in (0, -32):
        with pytest.raises(ct.ScheduleError, match="does not divide"):
            rs.pack("U", axis=0, tile=tile)
    for tile in (2.0, "32"):
        with pytest.raises(ct.ScheduleError, match="pack: argument 'tile' must be int"):
            rs.pack("U", axis=0, tile=tile)
    for not_a_weight in ("h", "gates", "children", "out", "nope"):
        with pytest.raises(ct.ScheduleError, match=f"{not_a_weight!r} is not a weight"):
            rs.pack(not_a_weight, axis=0, tile=1)
    for axis in (2, -1):
        with pytest.raises(ct.ScheduleError, match="out of range"):
            rs.pack("U", axis=axis, tile=32)
    for axis in ("0", None):
        with pytest.raises(ct.ScheduleError, match="pack: argument 'axis' must be int"):
            rs.pack("U", axis=axis, tile=32)
    assert not rs.trace and not rs.plan.packs
    rs.pack("U", axis=0, tile=32)
    packed = rs.func
    with pytest.raises(ct.ScheduleError):
        rs.pack("U", axis=0, tile=32)
    with pytest.raises(ct.ScheduleError, match="already packed"):
        rs.pack("U", axis=0, tile=5)      # a tile that divides the packed shape
    tvm.ir.assert_structural_equal(rs.func, packed)
    assert [p[:3] for p in rs.plan.packs] == [("U", 0, 32)]


def test_pack_twice_says_already_packed(fresh):
    rs = fresh("TreeLSTM").pack("U", axis=0, tile=32)
    with pytest.raises(ct.ScheduleError, match="already packed"):
        rs.pack("U", axis=0, tile=32)


@pytest.mark.parametrize("axis, tile, groups, shape", [(0, 4, 1, (12, 5)), (1, 2, 1, (3, 8)), (0, 2, 3, (12, 4))])
def test_untile_axis_inverts_tile_axis(axis, tile, groups, shape):
    """The transform function's pack reads W[untile(p)] for each packed index p: a bijection."""
    forward = tir_rewrites.tile_axis(axis, tile, groups, shape[axis])
    inverse = tir_rewrites.untile_axis(axis, tile, groups, shape[axis])
    seen = set()
    for index in np.ndindex(*shape):
        packed = tuple(int(x) for x in forward(*index))
        assert tuple(int(x) for x in inverse(*packed)) == index
        seen.add(packed)
    assert len(seen) == int(np.prod(shape))


@pytest.mark.parametrize("name, weights", [("TreeLSTM", ["U", "W"]), ("TreeFC", ["W"])])
def test_same_numbers(check_numbers, make_model, batches, name, weights):
    def recipe(rs):
        rs.specialize_leaves()
        for w in weights:
            rs.pack(w, axis=0, tile=32)
    packed = check_numbers(name, recipe)
    assert [p[:3] for p in packed.plan.packs] == [(w, 0, 32) for w in weights]
    # the transform function laid the weights out so: W_packed[r // 32, c, r % 32] = W[r, c]
    model = make_model(name)
    kernel = dict(zip([n for n, _, _ in packed.signature.weights], packed._weights))
    for w in weights:
        rows, cols = model.weights[w].shape
        want = model.weights[w].reshape(rows // 32, 32, cols).transpose(0, 2, 1)
        np.testing.assert_array_equal(kernel[f"{w}_packed"], want)
        assert w not in kernel
    # and the numbers are those of the unpacked program
    plain = check_numbers(name, lambda rs: rs.specialize_leaves())
    for batch in batches:
        np.testing.assert_allclose(packed(batch), plain(batch), atol=1e-6, rtol=0)
