"""The TIR pipeline kernels are built with (tir_pipeline.py): TVM's, with register tiles of up to
2 KB kept on the stack.  TVM's own LowerTVMBuiltin sends any buffer of 1 KB or more to a heap
workspace, where LLVM cannot keep a 5 x 5 TreeLSTM tile (1.6 KB) in registers."""
import numpy as np
import tvm
import tvm_ffi
from tvm import relax

import cortex_tvm as ct
import cortex_tvm.relax  # noqa: F401 - ct.relax
from cortex_tvm import build, recipes, tir_pipeline
from cortex_tvm.policy.padding import padded_model
from cortex_tvm.target import make_target

H = 32
#: AVX-512 code, built here and not run: its 5 x 5 tile holds 25 x 64 B of accumulators
AVX512 = {"kind": "llvm", "mtriple": "x86_64-linux-gnu", "mcpu": "skylake-avx512"}


def _scheduled_module(target, knobs):
    model = ct.models.TreeLSTM(hidden_size=H, vocab_size=30)
    tgt = make_target(target)
    padded = padded_model(model, tgt)
    recipe = recipes.resolve(padded, tgt, None).with_knobs(**knobs)
    rs, _ = build.schedule_model(padded, tgt, recipe)
    return model, tgt, rs.finalize().module()


def _allocations(mod):
    """(bytes, marked to stay on the stack) of every constant-size global allocation."""
    found = []

    def on_alloc(alloc):
        size = tir_pipeline._bytes(alloc.buffer)
        if size is not None and alloc.buffer.scope() == "global":
            found.append((size, tir_pipeline.DISABLE_LOWER_BUILTIN in alloc.annotations))
    for func in mod.functions.values():
        if isinstance(func, tvm.tirx.PrimFunc):
            tvm_ffi.structural_walk(func.body, (tvm.tirx.AllocBuffer, on_alloc))
    return found


def test_keep_tiles_on_stack_marks_the_tile_and_nothing_larger():
    _, tgt, mod = _scheduled_module(AVX512, {"node_tile": 5, "k_unroll": 4})
    base, _, _ = tvm.tirx.get_tir_pipeline("s_tir")
    lowered = base(tvm.tirx.transform.BindTarget(tgt.with_host(tgt))(mod))
    before = _allocations(lowered)
    # the 5 nodes x 5 gates x 16 lanes accumulator tile, above TVM's 1 KB stack limit
    assert (5 * 5 * 16 * 4, False) in before
    after = _allocations(tir_pipeline.KeepTilesOnStack(lowered))
    assert sorted(s for s, _ in after) == sorted(s for s, _ in before)
    assert all(marked == (size <= tir_pipeline.STACK_TILE_BYTES) for size, marked in after)
    assert (5 * 5 * 16 * 4, True) in after


def test_the_tile_is_an_alloca_with_this_pipeline_and_a_workspace_without():
    _, tgt, mod = _scheduled_module(AVX512, {"node_tile": 5, "k_unroll": 4})
    ours = tvm.compile(mod, target=tgt, tir_pipeline=ct.TIR_PIPELINE).mod.inspect_source("ll")
    tvms = tvm.compile(mod, target=tgt).mod.inspect_source("ll")
    assert "TVMBackendAllocWorkspace" in tvms
    assert "TVMBackendAllocWorkspace" not in ours


def test_a_relax_module_gives_the_same_roots_with_either_pipeline():
    trees, vocab = ct.data.sst_sample()
    model = ct.models.TreeLSTM(hidden_size=H, vocab_size=len(vocab))
    tgt = make_target("llvm")
    recipe = recipes.resolve(padded_model(model, tgt), tgt, None).with_knobs(node_tile=5, k_unroll=4)
    mod, make_inputs = ct.relax.as_relax(model, tgt, schedule=recipe)
    batch = trees[:6]
    want = model.reference(batch)
    for pipeline in (ct.TIR_PIPELINE, "default"):
        vm = relax.VirtualMachine(tvm.compile(mod, target=tgt, tir_pipeline=pipeline), tvm.cpu())
        np.testing.assert_allclose(vm["main"](*make_inputs(batch)).numpy(), want, atol=1e-5, rtol=0)


def test_the_pipeline_leaves_device_code_alone():
    func = tvm.tirx.PrimFunc([], tvm.tirx.Evaluate(0)).with_attr("target", tvm.target.Target("cuda"))
    assert tir_pipeline.keep_tiles_on_stack(func).same_as(func)
