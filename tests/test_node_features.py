"""Per-node feature inputs (`ra.node_features`, `inputs="features"`): every zoo model that takes
them against the float64 per-node reference, the array path, the IR, and every bad input."""
import numpy as np
import pytest

import cortex_tvm as ct
from cortex_tvm import ra
from cortex_tvm.data import dag_postorder, grid_dag, postorder, sequences, sst_sample
from cortex_tvm.models.float64_walk import reference64
from cortex_tvm.schedule import RecSchedule, ScheduleError
from cortex_tvm.signature import KernelSignature

M = ct.models
H, F = 24, 20
TREES = sst_sample()[0][:6]


def rows_for(structures, size, seed=0, order=postorder):
    count = sum(len(order(s)) for s in structures)
    return np.random.default_rng(seed).standard_normal((count, size)).astype(np.float32)


def close(out, ref, tol=1e-4):
    err = np.max(np.abs(out - ref)) / max(1.0, np.max(np.abs(ref)))
    assert err < tol, err


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


def _preorder_forest(trees):
    """The forest as a parent array in another order than the Nodes' post-order: trees reversed,
    each in pre-order (siblings keep their order, so it is the same forest); and perm, where
    node k of the arrays is node perm[k] of the post-order listing."""
    post, offset = {}, 0
    for tree in trees:
        for k, n in enumerate(postorder(tree)):
            post[id(n)] = offset + k
        offset += len(postorder(tree))
    order, parent_of = [], {}
    for tree in reversed(trees):
        stack = [tree]
        while stack:
            n = stack.pop()
            order.append(n)
            for c in n.children or ():
                parent_of[id(c)] = n
            stack.extend(reversed(n.children or ()))
    position = {id(n): k for k, n in enumerate(order)}
    parents = np.array([position[id(parent_of[id(n)])] if id(n) in parent_of else -1 for n in order])
    return parents, np.array([post[id(n)] for n in order])


def test_parent_arrays_take_features_in_node_order(compiled, kernels):
    _, trees = compiled["treelstm"]
    X = rows_for(trees, F, seed=3)
    parents, perm = _preorder_forest(trees)
    run = kernels["treelstm"]
    nodes = run(parents=parents, features=X[perm], all_nodes=True)      # no words= needed
    close(nodes, np.concatenate(run(trees, all_nodes=True, features=X))[perm], 1e-6)
    close(run(parents=parents, features=X[perm]), run(trees, features=X)[::-1], 1e-6)


def test_hand_written_program_with_node_features():
    n, Hs, Fs = ra.node(), 16, 12
    x = ra.node_features("x", Fs)
    Wx, U = ra.weight("Wx", (Hs, Fs)), ra.weight("U", (Hs, Hs))
    h = ra.rec_placeholder("h", (Hs,))
    f, k = ra.reduce_axis(Fs, "f"), ra.reduce_axis(Hs, "k")
    leaf = ra.compute((Hs,), lambda i: ra.tanh(ra.sum(Wx[i, f] * x[n, f], f)), name="leaf_h")
    kids = ra.compute((Hs,), lambda i: h[ra.child(n, 0), i] + h[ra.child(n, 1), i], name="kids")
    f2 = ra.reduce_axis(Fs, "f2")
    inner = ra.compute((Hs,), lambda i: ra.tanh(ra.sum(U[i, k] * kids[k], k) + ra.sum(Wx[i, f2] * x[n, f2], f2)),
                       name="inner_h")
    program = ra.rec_compute(ra.Tree(2), {h: (leaf, inner)})
    rng = np.random.default_rng(1)
    weights = {"Wx": rng.standard_normal((Hs, Fs)).astype(np.float32) * 0.3,
               "U": rng.standard_normal((Hs, Hs)).astype(np.float32) * 0.3}
    compiled = ct.compile(program, weights=weights)
    X = rows_for(TREES[:3], Fs, seed=5)
    out = compiled(TREES[:3], features=X)

    rows = iter(X.astype(np.float64))
    def node_h(t):
        kids = [node_h(c) for c in t.children or ()]
        row = next(rows)                       # post-order: a node's row after its children's
        if not kids:
            return np.tanh(weights["Wx"] @ row)
        return np.tanh(weights["U"] @ (kids[0] + kids[1]) + weights["Wx"] @ row)
    close(out, np.stack([node_h(t) for t in TREES[:3]]))


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


def test_molecule_example_matches_its_float64_reference():
    """examples/dag_rnn_molecules.py: atom features on DAGs (rings share an atom) vs float64 numpy."""
    import importlib.util
    import pathlib
    path = pathlib.Path(__file__).resolve().parents[1] / "examples" / "dag_rnn_molecules.py"
    spec = importlib.util.spec_from_file_location("dag_rnn_molecules", path)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    result = example.main(["--molecules", "8", "--hidden", "16", "--batch", "4"])
    assert result["max_abs_err"] <= example.TOLERANCE and result["shared"] == 8


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


@ct.recursive
def featured_rnn(node, p):
    x = p.Wx @ node.features + p.b
    if node.is_leaf:
        return ct.tanh(x)
    return ct.tanh(p.U @ (featured_rnn(node.children[0], p) + featured_rnn(node.children[1], p)) + x)


def test_traced_cell_reads_node_features():
    Hs, Fs = 16, 24
    rng = np.random.default_rng(4)
    weights = {"Wx": (rng.standard_normal((Hs, Fs)) * 0.2).astype(np.float32),
               "b": rng.standard_normal(Hs).astype(np.float32),
               "U": (rng.standard_normal((Hs, Hs)) * 0.2).astype(np.float32)}
    trees = TREES[:4]
    X = rows_for(trees, Fs, seed=6)
    compiled = ct.compile(featured_rnn, weights=weights, features=Fs)
    assert compiled.signature.node_features == (("features", Fs, "float32"),)
    w = {k: v.astype(np.float64) for k, v in weights.items()}
    rows = iter(X.astype(np.float64))

    def node_h(t):                                  # post-order: children's rows come first
        kids = [node_h(c) for c in t.children or ()]
        x = w["Wx"] @ next(rows) + w["b"]
        return np.tanh(x) if not kids else np.tanh(w["U"] @ (kids[0] + kids[1]) + x)
    ref = np.stack([node_h(t) for t in trees])
    close(compiled(trees, features=X), ref)
    model = ct.frontend.TracedModel(featured_rnn, weights, 2, features=Fs)
    close(model.reference(trees, features=X), ref)
    assert "features[n, e]" in ct.frontend.ra_text(model.program)
    with pytest.raises(ValueError, match=r"give their width: ct.compile\(cell, weights=..., features=F\)"):
        ct.compile(featured_rnn, weights=weights)
    with pytest.raises(ValueError, match="never reads node.features"):
        ct.compile(TREE_FC_CELL, weights={"emb": np.ones((5, 4), np.float32), "W": np.eye(4, dtype=np.float32),
                                           "b": np.zeros(4, np.float32)}, features=4)


@ct.recursive
def TREE_FC_CELL(node, p):
    if node.is_leaf:
        return p.emb[node.word]
    return ct.tanh(p.W @ (TREE_FC_CELL(node.children[0], p) + TREE_FC_CELL(node.children[1], p)) + p.b)


def _loss64(model, trees, X, R, weights=None):
    probe = ct.models.TreeLSTM(model.hidden_size, inputs="features", embed_size=model.embed_size)
    probe.load_weights(weights or model.weights)
    return float((reference64(probe, trees, features=X) * R).sum())


def test_training_gradients_of_weights_and_features_match_central_differences():
    """vjp of a model fed features: every weight's gradient and the features' own (what an encoder
    that made them backpropagates), against float64 central differences of reference64."""
    Hs, Fs, trees = 8, 6, TREES[:3]
    model = ct.models.TreeLSTM(Hs, inputs="features", embed_size=Fs)
    X = rows_for(trees, Fs, seed=8)
    compiled = model.compile(training=True)
    out, vjp = compiled.vjp(trees, features=X)
    close(out, reference64(model, trees, features=X))
    R = np.random.default_rng(9).standard_normal(out.shape)
    grads = vjp(R.astype(np.float32))
    assert sorted(grads) == ["U", "W", "bU", "bW", "features"] and grads["features"].shape == X.shape
    eps, rng = 1e-4, np.random.default_rng(10)
    X64 = X.astype(np.float64)
    for _ in range(12):                                 # the features' gradient, sampled entries
        i, j = rng.integers(len(X)), rng.integers(Fs)
        up, down = X64.copy(), X64.copy()
        up[i, j] += eps
        down[i, j] -= eps
        want = (_loss64(model, trees, up, R) - _loss64(model, trees, down, R)) / (2 * eps)
        assert abs(grads["features"][i, j] - want) <= 1e-4 * max(1.0, np.abs(grads["features"]).max()), (i, j)
    for name in ("W", "U", "bW"):                      # the weights', sampled entries
        for _ in range(4):
            index = tuple(rng.integers(d) for d in model.weights[name].shape)
            moved = []
            for sign in (1, -1):
                w = {k: v.astype(np.float64) for k, v in model.weights.items()}
                w[name][index] += sign * eps
                moved.append(_loss64(model, trees, X64, R, {k: v.astype(np.float32) for k, v in w.items()}))
            want = (moved[0] - moved[1]) / (2 * eps)
            # float32 weights moved by 1e-4: the difference itself carries ~1e-3 relative error
            assert abs(grads[name][index] - want) <= 2e-3 * max(1.0, np.abs(grads[name]).max()), (name, index)
    # parent arrays: the features' gradient in the caller's node order
    parents, perm = _preorder_forest(trees)
    _, vjp_arrays = compiled.vjp(parents=parents, features=X[perm])
    by_arrays = vjp_arrays(R[::-1].astype(np.float32))
    close(by_arrays["features"], grads["features"][perm], 1e-5)
    close(by_arrays["U"], grads["U"], 1e-5)
    with pytest.raises(ValueError, match="per-node features.*features="):
        compiled.vjp(trees)


def test_torch_module_backpropagates_into_the_encoder_that_made_the_features():
    """as_torch() of a model fed features: loss.backward() fills the weights' .grad and the
    features' own, so an encoder in front (here a Linear layer) trains through the tree model."""
    torch = pytest.importorskip("torch")
    Hs, Fs, trees = 8, 6, TREES[:3]
    model = ct.models.TreeLSTM(Hs, inputs="features", embed_size=Fs)
    module = model.compile(training=True).as_torch()
    tokens = torch.from_numpy(rows_for(trees, 5, seed=11))
    encoder = torch.nn.Linear(5, Fs)
    X = encoder(tokens)
    loss = (module(trees, features=X) ** 2).sum()
    loss.backward()
    assert encoder.weight.grad is not None and module.U.grad is not None
    # the same gradients from vjp: d loss / d X, pulled through the encoder by hand
    out, vjp = module.compiled.vjp(trees, features=X.detach().numpy())
    grads = vjp(2 * out)
    close(encoder.weight.grad.numpy(), grads["features"].T @ tokens.numpy(), 1e-5)
    close(module.U.grad.numpy(), grads["U"], 1e-5)


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
    parents, perm = _preorder_forest(trees)
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
