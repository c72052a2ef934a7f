"""The GPU schedule's arithmetic, checked on the CPU: per-level CUDA kernels with their thread loops run serially.

With every blockIdx/threadIdx loop made serial, each stage of a node runs to
completion before the next (as with __syncthreads between them), so the
program computes what one launch per level computes on a GPU.  This checks
the node-loop bound and guards, the merged node loop, packed weights, the
shared scratchpads and the register accumulators numerically, without a GPU.
(The persistent kernel's grid barrier cannot be emulated this way.)
"""
from __future__ import annotations

import numpy as np
import pytest
import tvm
import tvm_ffi
from tvm import tirx

import reference
from cortex_tvm import build, compile_cache
from cortex_tvm.runtime import CompiledModel, model_weight_arrays

import cortex_tvm as ct
from _gpu_common import H, MODELS, recipe


def _serial(f):
    if f.kind == tirx.ForKind.THREAD_BINDING:
        return tirx.For(f.loop_var, f.min, f.extent, tirx.ForKind.SERIAL, f.body)
    return f


@pytest.mark.parametrize("name", MODELS)
def test_per_level_gpu_schedule_matches_reference_on_cpu(sst, name):
    trees, vocab = sst
    model = getattr(ct.models, name)(hidden_size=H, vocab_size=len(vocab))
    rs, used = build.schedule_model(model, build.make_target("cuda"), recipe(name, "per_level"))
    assert "thread_binding" in rs.show()
    # every function, the parameter transforms (GPU-bound leaf tables and packing) included
    mod = tvm.IRModule({gv.name_hint: tvm_ffi.structural_map(f, (tirx.For, _serial), order="post")
                        for gv, f in rs.finalize().module().functions.items()})
    target = build.make_target("llvm")
    executable = compile_cache.build_module(mod, target)
    emulated = CompiledModel(rs.signature, executable, target, rs.plan, model_weight_arrays(model, rs.signature),
                             vocab_bound=model.vocab_bound, model_name=name, recipe_name="emu")
    weights = {k: np.array(v) for k, v in model.weights.items()}
    batch = trees[:100]
    ref = reference.tree_fc(batch, weights) if name == "TreeFC" else reference.tree_lstm(batch, weights)[0]
    np.testing.assert_allclose(emulated(batch), np.stack([h[-1] for h in ref]), atol=1e-5, rtol=0)
