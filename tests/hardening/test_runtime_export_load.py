"""Export and load: a load in a fresh process imports only the deploy side and runs the same
numbers; load_weights on a loaded model is validated."""
import os

import numpy as np
import pytest

import cortex_tvm as ct
from cortex_tvm.data import random_trees

import reference as ref
from runtime_util import H, run_python


def test_export_load_in_fresh_process(tmp_path, sst):
    V = len(sst[1])
    model = ct.models.TreeLSTM(hidden_size=H, vocab_size=V)      # default recipe: packs and hoists
    compiled = model.compile()
    path = compiled.export(tmp_path / "lstm")
    assert sorted(os.listdir(path)) == ["lib.so", "meta.json", "weights.npz"]
    np.save(tmp_path / "want.npy", compiled(sst[0][:50]))
    # weights at load: a TreeFC on the "none" schedule takes the model's own parameters
    fc = ct.models.TreeFC(hidden_size=H, vocab_size=V)
    fc_path = fc.compile().export(tmp_path / "fc")              # packs W
    rng = np.random.default_rng(0)
    new = {k: (rng.standard_normal(v.shape) * 0.3).astype(np.float32) for k, v in fc.weights.items()}
    np.savez(tmp_path / "new.npz", **new)
    np.save(tmp_path / "want_fc.npy", ref.roots("TreeFC", sst[0][:20], new))
    out = run_python(f"""
        import numpy as np, cortex_tvm as ct
        trees, _ = ct.data.sst_sample()
        c = ct.load({str(path)!r})
        assert c.model_name == "TreeLSTM" and c.recipe_name == "derived", (c.model_name, c.recipe_name)
        np.testing.assert_array_equal(c(trees[:50]), np.load({str(tmp_path / 'want.npy')!r}))
        per_node = c(trees[:3], all_nodes=True)
        assert [len(p) for p in per_node] == [len(ct.data.postorder(t)) for t in trees[:3]]
        try:
            c([ct.data.Node(word=10 ** 6)])
            raise SystemExit("vocabulary bound not kept")
        except ValueError as err:
            assert "vocabulary" in str(err)
        new = dict(np.load({str(tmp_path / 'new.npz')!r}))
        f = ct.load({str(fc_path)!r}, weights=new)
        np.testing.assert_allclose(f(trees[:20]), np.load({str(tmp_path / 'want_fc.npy')!r}), atol=1e-4)
        import sys
        # the deploy side and the ground floor it stands on (docs/contributing.md); any other
        # package module is the compile side, a new one included
        deploy_side = {{"amx_bf16", "blas_threads", "call_args", "config", "data", "distinct_leaves", "export",
                        "flatten", "integrity", "kernel_args", "linearize", "linearize_arrays", "node_features",
                        "plan", "runtime", "signature", "target", "torch_interop", "unrolled_levels", "version",
                        "vjp", "weights"}}
        loaded = [m for m in sys.modules if m.split(".")[0] == "cortex_tvm" and len(m.split(".")) > 1
                  and m.split(".")[1] not in deploy_side]
        print("outside the deploy side:", sorted(loaded))
        print("deploy side:", sorted({{m.split(".")[1] for m in sys.modules if m.startswith("cortex_tvm.")}}))
        print("compiles", ct.compile_count())
    """)
    assert "outside the deploy side: []" in out and "compiles 0" in out, out


def test_load_weights_validated(tmp_path):
    fc = ct.models.TreeFC(hidden_size=H, vocab_size=30)
    path = fc.compile().export(tmp_path / "fc")
    good = {k: v.copy() for k, v in fc.weights.items()}
    with pytest.raises(ValueError, match="missing weights"):
        ct.load(path, weights={"emb": good["emb"]})
    with pytest.raises(TypeError, match="dtype"):
        ct.load(path, weights={**good, "b": good["b"].astype(np.float64)})
    with pytest.raises(TypeError, match="dict"):
        ct.load(path, weights=[1, 2])
    aliased = {"emb.weight": good["emb"], "W.weight": good["W"], "W.bias": good["b"]}
    trees = random_trees(4, (1, 8), seed=1, vocab_size=30)
    np.testing.assert_allclose(ct.load(path, weights=aliased)(trees), fc.reference(trees), atol=1e-5)
    with pytest.raises(FileNotFoundError, match="not a directory"):
        ct.load(tmp_path / "nowhere")
