"""Per-node feature inputs (`ra.node_features`, `inputs="features"`) on every zoo model that takes
them: against the float64 per-node reference, the array path, the IR and schedule, export and load,
every bad input, the Relax VM and the torch module.  Each model is compiled once (module fixtures)."""
import numpy as np
import pytest

import cortex_tvm as ct
from cortex_tvm import ra
from cortex_tvm.data import dag_postorder, grid_dag, postorder, sequences
from cortex_tvm.models.float64_walk import reference64
from cortex_tvm.schedule import RecSchedule, ScheduleError
from cortex_tvm.signature import KernelSignature

from node_features_util import TREES, F, H, M, close, preorder_forest, rows_for


CASES = {
    "treelstm": (lambda: M.TreeLSTM(H, inputs="features", embed_size=F), TREES),
    "treelstm_inner": (lambda: M.TreeLSTM(H, inputs="features", embed_size=F, inner_words=True), TREES),
    "treefc": (lambda: M.TreeFC(H, inputs="features"), TREES),
    "treegru": (lambda: M.TreeGRU(H, inputs="features", embed_size=F), TREES),
    "childsum": (lambda: M.ChildSumTreeLSTM(H, inputs="features", embed_size=F, max_children=2), TREES),
    "seqlstm": (lambda: M.SeqLSTM(H, inputs="features", embed_size=F), sequences([[1, 2, 3], [4, 5], [6, 7, 8, 9]])),
    "seqgru": (lambda: M.SeqGRU(H, inputs="features", embed_size=F), sequences([[1, 2, 3], [4, 5, 6, 7]])),
    "dagrnn": (lambda: M.DAGRNN(H, inputs="features", embed_size=F), [grid_dag(3, 4), grid_dag(2, 2, seed=1)]),
}


@pytest.fixture(scope="module")
def compiled():
    return {name: (make(), structures) for name, (make, structures) in CASES.items()}


@pytest.fixture(scope="module")
def kernels(compiled):
    return {name: model.compile() for name, (model, _) in compiled.items()}


@pytest.mark.parametrize("name", sorted(CASES))
def test_zoo_model_on_features_equals_float64_reference(compiled, kernels, name):
    model, structures = compiled[name]
    order = dag_postorder if name == "dagrnn" else postorder
    X = rows_for(structures, model.embed_size, order=order)
    out = kernels[name](structures, features=X)
    close(out, reference64(model, structures, features=X))
    # the rows are read by node: other features, other results
    assert np.max(np.abs(kernels[name](structures, features=X[::-1].copy()) - out)) > 1e-3


def test_inner_rows_matter_only_where_inner_nodes_read_them(compiled, kernels):
    model, trees = compiled["treelstm"]
    X = rows_for(trees, F)
    inner = np.concatenate([[n.children is not None for n in postorder(t)] for t in trees])
    Y = X.copy()
    Y[inner] = 7.0
    np.testing.assert_array_equal(kernels["treelstm"](trees, features=Y), kernels["treelstm"](trees, features=X))
    assert np.max(np.abs(kernels["treelstm_inner"](trees, features=Y)
                         - kernels["treelstm_inner"](trees, features=X))) > 1e-3


def test_all_nodes_and_per_tree_arrays(compiled, kernels):
    model, trees = compiled["treegru"]
    X = rows_for(trees, F)
    per_tree = np.split(X, np.cumsum([len(postorder(t)) for t in trees])[:-1])
    nodes = kernels["treegru"](trees, all_nodes=True, features=per_tree)
    assert [len(n) for n in nodes] == [len(postorder(t)) for t in trees]
    close(np.stack([n[-1] for n in nodes]), reference64(model, trees, features=X))


def test_parent_arrays_take_features_in_node_order(compiled, kernels):
    _, trees = compiled["treelstm"]
    X = rows_for(trees, F, seed=3)
    parents, perm = preorder_forest(trees)
    run = kernels["treelstm"]
    nodes = run(parents=parents, features=X[perm], all_nodes=True)      # no words= needed
    close(nodes, np.concatenate(run(trees, all_nodes=True, features=X))[perm], 1e-6)
    close(run(parents=parents, features=X[perm]), run(trees, features=X)[::-1], 1e-6)


def test_signature_ir_and_schedule(compiled, kernels):
    model, _ = compiled["treelstm"]
    sig = model.lower(specialize_leaves=False).signature
    params = {p.name: p for p in sig.params()}
    assert params["features"].role == "node_features" and params["features"].shape == ("num_slots", F)
    assert "word" not in params and "emb" not in params
    assert [p.name for p in sig.params()][:2] == ["features", "children"]
    # the leaves read x at their own slot: an affine read, no gather through a word
    text = model.lower(specialize_leaves=True).func.script()
    assert "features[level_offsets[0] +" in text and "word" not in text
    # nothing that reads features can be a table computed once
    rs = RecSchedule(model.lower(specialize_leaves=True))
    with pytest.raises(ScheduleError, match="per-node features"):
        rs.hoist()
    assert kernels["treelstm"].plan.hoisted == ()
    # the kernel keeps the caller's width (no padding of the features) and pads H as usual
    assert kernels["treelstm"].signature.node_features == (("features", F, "float32"),)
    assert KernelSignature.from_json(sig.to_json()) == sig


def test_export_and_load_keep_features(compiled, kernels, tmp_path):
    _, trees = compiled["treefc"]
    X = rows_for(trees, H, seed=2)
    path = kernels["treefc"].export(tmp_path / "fc")
    loaded = ct.load(path)
    np.testing.assert_array_equal(loaded(trees, features=X), kernels["treefc"](trees, features=X))


def test_bad_features_are_named(compiled, kernels):
    _, trees = compiled["treelstm"]
    run = kernels["treelstm"]
    X = rows_for(trees, F)
    with pytest.raises(ValueError, match="per-node features.*features="):
        run(trees)
    with pytest.raises(TypeError, match="float64, expected float32"):
        run(trees, features=X.astype(np.float64))
    with pytest.raises(ValueError, match=r"expected \(nodes, 20\)"):
        run(trees, features=X[:, :5])
    with pytest.raises(ValueError, match="rows for a batch of"):
        run(trees, features=X[:-1])
    Y = X.copy()
    Y[4, 2] = np.nan
    with pytest.raises(ValueError, match="node 4 has a feature that is not finite"):
        run(trees, features=Y)
    lin = run.linearize(trees, X)
    from dataclasses import replace
    with pytest.raises(ValueError, match="lin.features must be"):
        run.run(replace(lin, features=lin.features[:-1]))
    with pytest.raises(ValueError, match="reads no per-node features"):
        M.TreeFC(8, 50).compile()(TREES[:2], features=X)


def test_constructor_errors():
    with pytest.raises(ValueError, match="leave vocab_size out"):
        M.TreeLSTM(8, 100, inputs="features")
    with pytest.raises(ValueError, match="vocab_size is required"):
        M.TreeLSTM(8)
    with pytest.raises(ValueError, match="inputs must be one of"):
        M.TreeLSTM(8, 100, inputs="pixels")
    with pytest.raises(ValueError, match="size must be a positive int"):
        ra.node_features("x", 0)


def test_relax_vm_and_torch_module_take_features(compiled, kernels):
    import tvm
    from tvm import relax
    model, trees = compiled["treelstm"]
    X = rows_for(trees, F, seed=7)
    ref = reference64(model, trees, features=X)
    mod, make_inputs = model.as_relax()
    params = [p.name for p in mod["main"].params]
    assert params[0] == "features" and "word" not in params
    vm = relax.VirtualMachine(tvm.compile(mod, target="llvm", tir_pipeline=ct.TIR_PIPELINE), tvm.cpu())
    close(vm["main"](*make_inputs(trees, features=X)).numpy(), ref)
    torch = pytest.importorskip("torch")
    with pytest.warns(UserWarning, match="inference only"):
        module = kernels["treelstm"].as_torch()
    close(module(trees, features=torch.from_numpy(X)).numpy(), ref)
