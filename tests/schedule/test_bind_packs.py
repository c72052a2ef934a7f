"""bind_packs: each packed weight's layout transform (in cortex_transform_params) spread over CUDA
thread blocks of `threads` threads.  Checked on the IR: no GPU is needed to schedule for one."""
import pytest
import tvm

import cortex_tvm as ct

from .irutil import bindings, loops_around, trace_names

K = tvm.tirx.ForKind


def test_ir_before_and_after(fresh):
    rs = fresh("TreeFC").specialize_leaves().pack("W", axis=0, tile=16)
    # W (32 x 32) packed in tiles of 16 columns: (2, 32, 16)
    assert bindings(loops_around(rs.transform_func, "pack_W")) == [
        (K.SERIAL, "2", None), (K.SERIAL, "32", None), (K.SERIAL, "16", None)]
    main = rs.func.script()
    assert rs.bind_packs(64) is rs
    # fused (1024 elements) and split: 16 blocks of 64 threads
    assert bindings(loops_around(rs.transform_func, "pack_W")) == [
        (K.THREAD_BINDING, "16", "blockIdx.x"), (K.THREAD_BINDING, "64", "threadIdx.x")]
    assert rs.func.script() == main                 # the inference is not touched
    assert trace_names(rs) == ["specialize_leaves", "pack", "bind_packs"]
    assert rs.trace[-1].args == {"threads": 64}


def test_every_packed_weight_is_bound(fresh):
    rs = fresh("TreeLSTM").specialize_leaves()
    rs.pack("W", axis=0, tile=16).pack("U", axis=0, tile=16).bind_packs()
    for weight in ("W", "U"):
        loops = bindings(loops_around(rs.transform_func, f"pack_{weight}"))
        assert [(kind, tag) for kind, _, tag in loops] == [(K.THREAD_BINDING, "blockIdx.x"),
                                                           (K.THREAD_BINDING, "threadIdx.x")]
        assert loops[1][1] == "256"                 # the default thread count


def test_preconditions(fresh):
    rs = fresh("TreeFC").specialize_leaves()
    with pytest.raises(ct.ScheduleError, match="^bind_packs: no weight is packed"):
        rs.bind_packs()
    rs.pack("W", axis=0, tile=16)
    script = rs.transform_func.script()
    for threads in (0, 2048):
        message = rf"^bind_packs: threads must be an int in \[1, 1024\], got {threads}$"
        with pytest.raises(ct.ScheduleError, match=message):
            rs.bind_packs(threads)
    assert rs.transform_func.script() == script
    rs.bind_packs(128)
    with pytest.raises(ct.ScheduleError, match="^bind_packs: 'pack_W' is already bound"):
        rs.bind_packs(128)
    assert trace_names(rs) == ["specialize_leaves", "pack", "bind_packs"]
