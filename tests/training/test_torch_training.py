"""Training through PyTorch: `compiled.vjp` and `as_torch()` against PyTorch's own autograd.

The reference is a TreeLSTM written here by recursion in float64 torch (one node at a time, no
levels, no slots), differentiated by torch.autograd: every weight's whole gradient is compared,
for a loss on the roots and on every node.  Then the module a user trains: parameters named as
the weights, an optimizer step reaching the compiled kernel, the errors.
"""
import warnings

import numpy as np
import pytest

import cortex_tvm as ct
from cortex_tvm import ra, runtime
from cortex_tvm import vjp as vjp_calls

torch = pytest.importorskip("torch")

from .cells import tree_fc  # noqa: E402
from .eager import EagerTreeLSTM  # noqa: E402 - needs torch

H = 24


@pytest.fixture(scope="module")
def setup(sst):
    trees, vocab = sst
    model = ct.models.TreeLSTM(H, len(vocab), seed=7)
    return trees[:12], model, model.compile(training=True)


def _torch_grads(model, loss_of):
    eager = EagerTreeLSTM(model.weights)
    loss_of(eager).backward()
    return {name: p.grad.numpy() for name, p in eager.named_parameters()}


def _assert_grads_close(got, want):
    assert sorted(got) == sorted(want)
    for name in want:
        scale = max(1e-3, float(np.abs(want[name]).max()))
        assert float(np.abs(got[name] - want[name]).max()) <= 2e-5 * scale + 1e-6, name


def test_vjp_of_the_roots_equals_torch_autograd(setup):
    trees, model, compiled = setup
    rng = np.random.default_rng(0)
    direction = rng.standard_normal((len(trees), H))
    out, vjp = compiled.vjp(trees)
    np.testing.assert_allclose(out, compiled(trees), rtol=0, atol=0)
    got = vjp(direction.astype(np.float32))
    want = _torch_grads(model, lambda m: (m(trees)[0] * torch.tensor(direction)).sum())
    _assert_grads_close(got, want)


def test_vjp_of_every_node_equals_torch_autograd(setup):
    trees, model, compiled = setup
    out, vjp = compiled.vjp(trees, all_nodes=True)
    assert [len(o) for o in out] == [len(ct.data.postorder(t)) for t in trees]
    rng = np.random.default_rng(1)
    directions = [rng.standard_normal(o.shape) for o in out]
    got = vjp([d.astype(np.float32) for d in directions])
    assert all(np.array_equal(a, b) for a, b in zip(vjp(np.concatenate(directions)).values(), got.values()))

    def loss(m):
        _, per_tree = m(trees)
        return sum((h * torch.tensor(d)).sum() for h, d in zip(per_tree, directions))
    _assert_grads_close(got, _torch_grads(model, loss))


def test_module_holds_the_weights_as_parameters(setup):
    _, model, compiled = setup
    module = compiled.as_torch()
    names = [name for name, _ in module.named_parameters()]
    assert names == list(model.weights) == ["emb", "W", "bW", "U", "bU"]
    for name, p in module.named_parameters():
        assert p.requires_grad and p.dtype == torch.float32
        np.testing.assert_array_equal(p.detach().numpy(), model.weights[name])
    assert list(module.state_dict()) == names
    assert "training" in repr(module)


def test_loss_backward_fills_grad_through_torch_layers(setup):
    trees, model, compiled = setup
    module = compiled.as_torch()
    classifier = torch.nn.Linear(H, 5, dtype=torch.float32)
    labels = torch.arange(len(trees)) % 5
    roots = module(trees)
    assert roots.requires_grad
    loss = torch.nn.functional.cross_entropy(classifier(roots), labels)
    d_roots, = torch.autograd.grad(loss, roots, retain_graph=True)
    loss.backward()
    _, vjp = compiled.vjp(trees)
    want = vjp(d_roots.numpy())
    for name, p in module.named_parameters():
        np.testing.assert_allclose(p.grad.numpy(), want[name], rtol=1e-6, atol=1e-7, err_msg=name)
    assert classifier.weight.grad is not None


def test_torch_compile_of_a_model_holding_the_module_gives_the_eager_gradients(setup, monkeypatch):
    """torch.compile traced into the module's linearizer and stopped ("Expected np.nditer base")
    where the process had not linearized before (Dynamo made the linearizer's first, cached array):
    the module's forward runs outside Dynamo's graphs, the layers around it inside them."""
    from cortex_tvm import linearize
    monkeypatch.setattr(linearize, "_sentinel_columns", {})     # as in a fresh process
    trees, _, compiled = setup
    torch.manual_seed(0)
    net = torch.nn.Sequential(compiled.as_torch(), torch.nn.Linear(H, 5))
    labels = torch.arange(len(trees)) % 5
    grads = []
    for run in (torch.compile(net, backend="eager"), net):
        net.zero_grad()
        torch.nn.functional.cross_entropy(run(trees), labels).backward()
        grads.append({name: p.grad.clone() for name, p in net.named_parameters()})
    assert sorted(grads[0]) == ["0.U", "0.W", "0.bU", "0.bW", "0.emb", "1.bias", "1.weight"]
    for name in grads[0]:
        torch.testing.assert_close(grads[0][name], grads[1][name], rtol=0, atol=0, msg=name)


def test_all_nodes_from_the_module_carry_gradients(setup):
    trees, model, compiled = setup
    module = compiled.as_torch()
    per_tree = module(trees[:3], all_nodes=True)
    assert [tuple(t.shape) for t in per_tree] == [(len(ct.data.postorder(t)), H) for t in trees[:3]]
    sum(t.sum() for t in per_tree).backward()
    _, vjp = compiled.vjp(trees[:3], all_nodes=True)
    want = vjp(np.ones((sum(len(t) for t in per_tree), H), np.float32))
    np.testing.assert_allclose(module.U.grad.numpy(), want["U"], rtol=1e-6, atol=1e-7)


def test_an_optimizer_step_reaches_the_kernel_without_recompiling(sst):
    trees, vocab = sst
    batch = trees[20:30]
    model = ct.models.TreeLSTM(H, len(vocab), seed=11)
    compiled = model.compile(training=True)
    module = compiled.as_torch()
    torch.manual_seed(0)
    classifier = torch.nn.Linear(H, 5)
    labels = torch.arange(len(batch)) % 5
    optimizer = torch.optim.Adagrad([*module.parameters(), *classifier.parameters()], lr=0.05, weight_decay=1e-4)
    losses = []
    for _ in range(6):
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(classifier(module(batch)), labels)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < 0.7 * losses[0], losses
    with torch.no_grad():
        after = module(batch).numpy()
    assert module.transform_seconds > 0
    # the kernel now runs on the stepped weights: as a fresh compile of them does
    trained = ct.models.TreeLSTM(H, len(vocab)).load_weights(module.state_dict())
    np.testing.assert_allclose(after, trained.compile()(batch), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(compiled(batch), after, rtol=0, atol=0)


def test_new_weights_reach_the_kernel_when_it_next_runs(sst, tmp_path, monkeypatch):
    """After load_weights a training model's backward reads the new weights as given; the
    kernel's padding and packing wait for its next run (a step whose forward is the backward's
    own makes none: as_torch loads after every optimizer step), then equal a fresh compile's,
    and an export writes them."""
    trees, vocab = sst
    batch = trees[20:30]
    model = ct.models.TreeLSTM(H, len(vocab), seed=3)
    compiled = model.compile(training=True)
    monkeypatch.setattr(compiled.adjoint.level_pass, "forward_pays", lambda lin: True)   # whatever the cores
    rng = np.random.default_rng(0)
    new = {name: (w + 0.05 * rng.standard_normal(w.shape)).astype(np.float32) for name, w in model.weights.items()}
    fresh = ct.models.TreeLSTM(H, len(vocab)).load_weights(new)
    compiled.load_weights(new)
    loaded = compiled.transform_seconds
    out, vjp = compiled.vjp(batch)
    grads = vjp(np.ones_like(out))
    assert compiled.transform_seconds == loaded                  # the step transformed nothing
    want_out, want_vjp = fresh.compile(training=True).vjp(batch)
    np.testing.assert_allclose(out, want_out, rtol=1e-6, atol=1e-7)
    _assert_grads_close(grads, want_vjp(np.ones_like(want_out)))
    np.testing.assert_allclose(compiled(batch), fresh.compile()(batch), rtol=1e-5, atol=1e-6)
    assert compiled.transform_seconds > loaded                   # the kernel's call made them
    np.testing.assert_allclose(ct.load(compiled.export(tmp_path / "stepped"))(batch), compiled(batch), rtol=0, atol=0)


def test_a_trained_module_says_when_torchs_threads_will_spin(setup, monkeypatch):
    """Several torch threads and OMP_WAIT_POLICY not PASSIVE: a UserWarning that names the fix."""
    from cortex_tvm.torch_interop import SPINNING_THREADS
    _, _, compiled = setup
    monkeypatch.setattr(torch, "get_num_threads", lambda: 2)
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    with pytest.warns(UserWarning, match="OMP_WAIT_POLICY=PASSIVE") as caught:
        compiled.as_torch()
    assert [str(w.message) for w in caught] == [SPINNING_THREADS]
    for policy, threads in (("passive", 2), ("", 1)):
        monkeypatch.setenv("OMP_WAIT_POLICY", policy)
        monkeypatch.setattr(torch, "get_num_threads", lambda threads=threads: threads)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            compiled.as_torch()


def test_a_module_that_was_not_compiled_for_training_says_so(setup, recwarn):
    trees, model, _ = setup
    module = model.compile().as_torch()
    assert any("inference only" in str(w.message) for w in recwarn.list)
    assert list(module.parameters()) == []


def test_training_errors(setup):
    trees, model, compiled = setup
    with pytest.raises(ValueError, match="compile it with training=True"):
        model.compile().vjp(trees)
    with pytest.raises(TypeError, match="training must be a bool"):
        model.compile(training="yes")
    # bf16 training multiplies on vdpbf16ps: a CPU target without it is refused by name
    with pytest.raises(ValueError, match="lacks avx512bf16"):
        model.compile(training=True, precision="bf16", target={"kind": "llvm", "mcpu": "haswell"})
    # another CPU's code cannot run the backward here: said before anything is built
    with pytest.raises(ValueError, match="training=True needs a target this machine runs.*aarch64"):
        model.compile(training=True, target="aarch64")
    _, vjp = compiled.vjp(trees)
    with pytest.raises(ValueError, match=r"must have shape \(12, 24\)"):
        vjp(np.zeros((12, 23), np.float32))
    with pytest.raises(ValueError, match="NaN or infinity"):
        vjp(np.full((12, 24), np.nan, np.float32))
    bad = dict(model.weights, U=np.zeros((5 * H, H), np.float32))
    with pytest.raises(ValueError, match="U"):
        compiled.load_weights(bad)
    import copy
    import pickle
    with pytest.raises(TypeError, match="state_dict"):
        pickle.dumps(compiled.as_torch())
    for cast in ("double", "half"):
        with pytest.raises(TypeError, match=r"parameter 'emb' is torch.float(64|16).*module.float\(\)"):
            getattr(compiled.as_torch(), cast)()(trees)
    for copied in (pickle.dumps, copy.deepcopy):        # (TVM's own error named no way out)
        with pytest.raises(TypeError, match=r"pickle cannot copy.*export\(path\).*cortex_tvm.load"):
            copied(compiled)


def test_an_operation_without_a_derivative_rule_is_refused_by_name():
    from tvm import te
    V = 10
    n, word = ra.node(), ra.node_input("word", V)
    emb, h = ra.weight("emb", (V, 4)), ra.rec_placeholder("h", (4,))
    leaf = ra.compute((4,), lambda i: emb[word[n], i], name="leaf_h")
    inner = ra.compute((4,), lambda i: te.log(1.0 + h[ra.child(n, 0), i] * h[ra.child(n, 1), i]), name="internal_h")
    program = ra.rec_compute(ra.Tree(2), {h: (leaf, inner)})
    weights = {"emb": np.ones((V, 4), np.float32)}
    ct.compile(program, weights=weights)                         # inference compiles
    with pytest.raises(ValueError, match=r"tirx\.log in block 'internal_h'"):
        ct.compile(program, weights=weights, training=True)


def test_a_traced_cell_trains_too():
    zoo = ct.models.TreeFC(8, 30, seed=4)
    trees = ct.data.random_trees(5, (2, 12), seed=3, vocab_size=30)
    compiled = ct.compile(tree_fc, weights=zoo.weights, max_children=2, training=True)
    _, vjp = compiled.vjp(trees)
    got = vjp(np.ones((5, 8), np.float32))
    _, zoo_vjp = zoo.compile(training=True).vjp(trees)
    want = zoo_vjp(np.ones((5, 8), np.float32))
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-6, err_msg=name)


def test_an_embedding_row_is_checked_when_a_batch_reads_it(sst, monkeypatch):
    """A trained model's load_weights (every optimizer step through as_torch) checks an embedding
    table row by row as batches read them, not the whole table: a NaN row is a ValueError naming
    it at the first vjp whose batch reads it, a batch that does not read it runs; the kernel's
    path, which transforms the whole table, refuses it at once; another weight's NaN is refused
    by load_weights itself."""
    trees, vocab = sst
    model = ct.models.TreeLSTM(hidden_size=8, embed_size=8, vocab_size=len(vocab), seed=3)
    compiled = model.compile(training=True)
    read = {n.word for t in trees[:12] for n in ct.data.postorder(t) if n.word is not None}
    row = min({n.word for n in ct.data.postorder(trees[12]) if n.word is not None} - read)
    bad = dict(model.weights)
    bad["emb"] = bad["emb"].copy()
    bad["emb"][row, 3] = np.nan
    compiled.load_weights(bad)
    out, vjp = compiled.vjp(trees[:12])         # does not read the row (a batch the pass runs on any cores)
    assert np.isfinite(out).all() and np.isfinite(vjp(np.ones_like(out))["U"]).all()
    with pytest.raises(ValueError, match=rf"vjp: weight 'emb': row {row}, read by this batch, contains NaN"):
        compiled.vjp(trees[12:13])
    with pytest.raises(ValueError, match=rf"run: weight 'emb': row {row} contains NaN"):
        compiled(trees[0:1])
    with pytest.raises(ValueError, match=rf"vjp: weight 'emb': row {row}, read by this batch"):
        compiled.vjp(trees[12:13])                # the failed whole-table check left the rows unchecked
    with pytest.raises(ValueError, match="weight 'U': contains NaN"):
        compiled.load_weights(dict(model.weights, U=np.full_like(model.weights["U"], np.inf)))
    compiled.load_weights(model.weights)                      # a clean table runs again
    np.testing.assert_allclose(compiled.vjp(trees[12:13])[0], model.compile()(trees[12:13]), rtol=1e-5, atol=1e-6)
    checked = []
    for module in (runtime, vjp_calls):      # (the kernel's run checks in the one, vjp in the other)
        monkeypatch.setattr(module, "check_rows", lambda *args: checked.append(sorted(args[3])))
    compiled.load_weights(model.weights)
    compiled.vjp(trees[:12])
    compiled(trees[0:1])                      # checks the whole table: the next batch's rows need no check
    compiled.vjp(trees[:12])
    assert checked == [["emb"], ["emb"], []]


def test_a_parameter_changed_in_place_is_checked_again(setup, monkeypatch):
    """The module hands a parameter changed in place (an optimizer's step) to the compiled model
    without taking the weights anew (`weights_changed`: the changed ones checked finite again)
    while every parameter keeps its memory, dtype, shape and strides and is contiguous; a
    parameter given new memory, or one whose memory is not contiguous (a copy in the compiled
    model), is taken anew (`load_weights`).  Each way the next forward computes on the new values."""
    trees, model, compiled = setup
    module = compiled.as_torch()
    calls = []

    def counted(name, method):
        def call(*args, **kwargs):
            calls.append(name)
            return method(*args, **kwargs)
        return call
    for name in ("_weights_changed", "load_weights"):         # (`weights_changed` less the marked finite)
        monkeypatch.setattr(compiled, name, counted(name.lstrip("_"), getattr(compiled, name)))

    def check(weights):         # the training forward (the pass's own) and the kernel's, padded anew
        want = ct.models.TreeLSTM(H, model.vocab_size).load_weights(weights).compile()(trees)
        np.testing.assert_allclose(module(trees).detach().numpy(), want, rtol=1e-5, atol=1e-6)
        with torch.no_grad():
            np.testing.assert_allclose(module(trees).numpy(), want, rtol=1e-5, atol=1e-6)
    with torch.no_grad():
        module.U.mul_(0.5)
    check({name: p.detach().numpy() for name, p in module.named_parameters()})
    assert calls == ["weights_changed"]
    with torch.no_grad():
        module.U[3, 4] = float("nan")
    with pytest.raises(ValueError, match="weights_changed: weight 'U': contains NaN or infinity"):
        module(trees)
    module.U.data = torch.from_numpy(model.weights["U"].copy())                   # new memory
    module.W.data = torch.from_numpy(np.ascontiguousarray(model.weights["W"].T)).t()    # not contiguous
    check(model.weights)
    with torch.no_grad():
        module.W.mul_(2.0)                             # in place, in memory the compiled model copied
    check(dict(model.weights, W=2 * model.weights["W"]))
    assert calls[-2:] == ["load_weights", "load_weights"]
    compiled.load_weights(model.weights)             # (the module's fixture is shared)
