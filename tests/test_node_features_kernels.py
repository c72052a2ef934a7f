"""Kernel variants of a model fed node features: tuned from a log, recursively unrolled, and padded
to the vector width (no read of the features past the caller's width)."""
import numpy as np
import pytest

import cortex_tvm as ct
from cortex_tvm.models.float64_walk import reference64

from node_features_util import TREES, M, close, preorder_forest, rows_for


def test_tuning_a_model_fed_features(tmp_path):
    """The tuner times a features model on seeded rows (timing does not read their values) and
    its record compiles back."""
    from cortex_tvm import tune
    model = ct.models.TreeLSTM(16, inputs="features", embed_size=24)
    log = tmp_path / "t.jsonl"
    best = tune.tune(model, trials=2, log=str(log), batch_size=4, max_batches=2, progress=False, confirm_rounds=1)
    assert best is not None
    with pytest.raises(ValueError, match="RPC does not send per-node features"):
        tune.tune(model, trials=1, log=str(tmp_path / "rpc.jsonl"), rpc=("127.0.0.1", 9, "none"), progress=False)
    compiled = model.compile(tuning_log=str(log))
    X = rows_for(TREES[:3], 24, seed=12)
    close(compiled(TREES[:3], features=X), reference64(model, TREES[:3], features=X))


def test_recursively_unrolled_kernel_takes_features():
    """max_unroll_depth=2 lays batches out in (step, chunk, phase) levels; the rows still follow
    each node, from Nodes and from parent arrays (which that kernel lays out through Nodes)."""
    model = ct.models.TreeLSTM(16, inputs="features", embed_size=12)
    compiled = model.compile(max_unroll_depth=2)
    assert compiled.plan.unroll is not None
    trees = TREES[:5]
    X = rows_for(trees, 12, seed=13)
    close(compiled(trees, features=X), reference64(model, trees, features=X))
    parents, perm = preorder_forest(trees)
    close(compiled(parents=parents, features=X[perm], all_nodes=True),
          np.concatenate(compiled(trees, all_nodes=True, features=X))[perm], 1e-6)


@pytest.mark.parametrize("make", [
    lambda: M.TreeFC(150, inputs="features"),
    lambda: M.TreeLSTM(150, inputs="features", embed_size=100),
    lambda: M.DAGRNN(150, inputs="features", embed_size=100),
    lambda: M.SeqGRU(150, inputs="features", embed_size=100),
], ids=["treefc", "treelstm", "dagrnn", "seqgru"])
def test_kernel_reads_no_feature_past_the_callers_width(make):
    """H=150 is padded (to a multiple of the vector width) but the features keep the caller's
    width: no read of the features may range past it.  (Zero weights would hide such a read in the
    results, so the TIR is read: each features[n, f] load's f, over its block's iteration domain.)"""
    import tvm
    import tvm_ffi
    from cortex_tvm.build import make_target
    from cortex_tvm.policy.padding import padded_model
    model = make()
    padded = padded_model(model, make_target("llvm"))
    width = model.embed_size
    func = padded.lower(specialize_leaves=True).func
    reads = {}       # each load of the features -> the extent of its feature index, from its own block

    def block(b):
        extents = {iv.var: iv.dom.extent for iv in b.iter_vars}

        def load(ld):
            if ld.source.name == "features":
                index = ld.indices[1]
                extent = extents.get(index) if isinstance(index, tvm.ir.Var) else None
                if isinstance(extent, tvm.tirx.IntImm) or ld not in reads:   # outer blocks see it too
                    reads[ld] = int(extent) if isinstance(extent, tvm.tirx.IntImm) else None
        tvm_ffi.structural_walk(b.body, (tvm.ir.TensorLoad, load), order="post")
    tvm_ffi.structural_walk(func.body, (tvm.s_tir.stmt.SBlock, block), order="post")
    assert reads and all(extent is not None and extent <= width for extent in reads.values()), (reads, width)
