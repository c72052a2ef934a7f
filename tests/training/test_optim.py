"""`cortex_tvm.optim.Adagrad` against torch.optim.Adagrad, the reference: the same parameters after
every step (dense gradients with weight decay and lr decay, sizes that are no multiple of a
vector, sparse rows, a repeated row in an uncoalesced gradient), the same state_dict both ways,
a TreeLSTM trained through `as_torch(sparse=True)` with DGL's groups, a step reaching the module's
kernel path (the parameters' versions counted), the loops alone against numpy (this CPU's build and
AVX2 code), an optimizer whose loops are AVX2 code (target=), and a clear error before any update on
what it does not take."""
import copy

import numpy as np
import pytest

import cortex_tvm as ct

torch = pytest.importorskip("torch")
from cortex_tvm import optim, runtime  # noqa: E402 - needs torch
from cortex_tvm import vjp as vjp_calls  # noqa: E402
from cortex_tvm.optim import Adagrad  # noqa: E402


def _twins(shapes, seed=0):
    generator = torch.Generator().manual_seed(seed)
    first = [torch.nn.Parameter(torch.randn(shape, generator=generator)) for shape in shapes]
    return first, [torch.nn.Parameter(p.detach().clone()) for p in first]


def _close(ours, reference, rtol=2e-6):
    for a, b in zip(ours, reference):
        np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=rtol, atol=rtol / 10)


@pytest.mark.parametrize("options", [dict(lr=0.05, weight_decay=1e-4),
                                     dict(lr=0.3, lr_decay=0.1, initial_accumulator_value=0.2, eps=1e-3)])
def test_dense_steps_equal_torch(options):
    shapes = [(450, 300), (37,), (3, 5, 7), (16,)]      # whole vectors, a short rest, none but a rest
    ours, reference = _twins(shapes)
    optimizer, torch_optimizer = Adagrad(ours, **options), torch.optim.Adagrad(reference, **options)
    generator = torch.Generator().manual_seed(1)
    for step in range(4):
        for a, b in zip(ours, reference):
            a.grad = torch.randn(a.shape, generator=generator)
            b.grad = a.grad.clone()
        ours[1].grad = None if step == 2 else ours[1].grad     # a parameter without a gradient: skipped
        reference[1].grad = None if step == 2 else reference[1].grad
        optimizer.step()
        torch_optimizer.step()
        _close(ours, reference)
    assert float(optimizer.state[ours[1]]["step"]) == 3 and float(optimizer.state[ours[0]]["step"]) == 4
    assert not torch.equal(ours[0], _twins(shapes)[0][0])       # it moved


def test_sparse_rows_equal_torch():
    (ours,), (reference,) = _twins([(50, 19)])
    optimizer, torch_optimizer = Adagrad([ours], lr=0.1), torch.optim.Adagrad([reference], lr=0.1)
    generator = torch.Generator().manual_seed(2)
    # rows sorted (no coalesce needed), a repeated row (summed, as torch), rows out of order, none
    for rows in ([3, 7, 49], [0, 3, 3, 12], [12, 0, 5], []):
        values = torch.randn((len(rows), 19), generator=generator)
        for p in (ours, reference):
            p.grad = torch.sparse_coo_tensor(torch.tensor([rows], dtype=torch.int64).reshape(1, -1), values, (50, 19))
        optimizer.step()
        torch_optimizer.step()
        _close([ours], [reference])
    untouched = [r for r in range(50) if r not in (0, 3, 5, 7, 12, 49)]
    start = _twins([(50, 19)])[0][0].detach()
    np.testing.assert_array_equal(ours.detach()[untouched].numpy(), start[untouched].numpy())


@pytest.mark.parametrize("mcpu", [None, "haswell"])
def test_the_loops_equal_numpy_as_avx512_and_avx2_code(mcpu):
    """The loops alone against numpy's float32 formula, built for this CPU and as AVX2 code (16-lane
    vectors split in two; run where the CPU has AVX2), whole vectors and a rest; their probes sum the
    new values (by lane and block), a vector's and the rest's alike: not finite where one is not."""
    from cortex_tvm.optim import build_loops, probe_rows
    from cortex_tvm.target import host_isa
    if mcpu and "avx2" not in host_isa():
        pytest.skip("this CPU cannot run AVX2 code")
    dense, rows = build_loops({"kind": "llvm", "mcpu": mcpu} if mcpu else "llvm")
    rng = np.random.default_rng(3)
    for n in (37, 4096, 16 * optim.PROBE_VECTORS * 2 + 5):
        param, grad = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
        sums = rng.random(n).astype(np.float32)
        g = grad + np.float32(1e-3) * param
        want_sums = sums + g * g
        want = param - np.float32(0.05) * (g / (np.sqrt(want_sums) + np.float32(1e-10)))
        probe = np.full((probe_rows(n), 16), 7, np.float32)
        dense(param, grad, sums, probe, 0.05, 1e-3, 1e-10)
        np.testing.assert_allclose(sums, want_sums, rtol=1e-6)
        np.testing.assert_allclose(param, want, rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(probe.sum(), want.sum(dtype=np.float64), rtol=1e-4, atol=1e-3)
        # a first vector's value, a middle one's, the last (a rest's where n has one)
        for bad in (0, n // 2, n - 1):
            spoilt = grad.copy()
            spoilt[bad] = np.nan
            dense(param, spoilt, sums, probe, 0.05, 1e-3, 1e-10)
            assert np.isnan(param[bad]) and not np.isfinite(probe).all()
            assert np.isfinite(np.delete(probe.reshape(-1), np.flatnonzero(~np.isfinite(probe)))).all()
            param[bad], sums[bad] = 0.5, 1.0
    table, table_sums = rng.standard_normal((50, 19)).astype(np.float32), rng.random((50, 19)).astype(np.float32)
    found, values = np.array([3, 7, 49], np.int64), rng.standard_normal((3, 19)).astype(np.float32)
    want_sums, want = table_sums.copy(), table.copy()
    want_sums[found] += values * values
    want[found] -= np.float32(0.1) * (values / (np.sqrt(want_sums[found]) + np.float32(1e-10)))
    probe = np.ones((3, 16), np.float32)
    rows(table, table_sums, found, values, probe, 0.1, 1e-10)
    np.testing.assert_allclose(table_sums, want_sums, rtol=1e-6)
    np.testing.assert_allclose(table, want, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(probe.sum(axis=1), want[found].sum(axis=1), rtol=1e-5, atol=1e-5)
    values[1, 18], values[2, 0] = np.inf, np.nan                     # the rest of row 7, a vector of row 49
    rows(table, table_sums, found, values, probe, 0.1, 1e-10)
    assert np.isfinite(probe.sum(axis=1)).tolist() == [True, False, False]


def test_a_state_dict_moves_between_the_two():
    ours, reference = _twins([(20, 3)])
    optimizer = Adagrad(ours, lr=0.1)
    ours[0].grad = torch.ones(20, 3)
    optimizer.step()
    torch_optimizer = torch.optim.Adagrad(reference, lr=0.1)
    torch_optimizer.load_state_dict(copy.deepcopy(optimizer.state_dict()))    # (else the sums are shared)
    with torch.no_grad():
        reference[0].copy_(ours[0])
    for p in (ours[0], reference[0]):
        p.grad = torch.full((20, 3), 0.5)
    optimizer.step()
    torch_optimizer.step()
    _close(ours, reference)
    again = Adagrad(_twins([(20, 3)])[0], lr=0.1)
    again.load_state_dict(copy.deepcopy(torch_optimizer.state_dict()))
    assert float(next(iter(again.state.values()))["step"]) == 2


def test_training_a_treelstm_with_sparse_rows_equals_torchs_adagrad(sst):
    trees, vocab = sst
    model = ct.models.TreeLSTM(8, len(vocab), embed_size=12, seed=3)
    compiled = model.compile(training=True)
    runs = []
    for optimizer_class in (Adagrad, torch.optim.Adagrad):
        compiled.load_weights(model.weights)
        module = compiled.as_torch(sparse=True)
        parameters = dict(module.named_parameters())
        optimizer = optimizer_class([{"params": [p for k, p in parameters.items() if k != "emb"], "lr": 0.05,
                                      "weight_decay": 1e-4}, {"params": [parameters["emb"]], "lr": 0.005}])
        losses = []
        for k in range(6):
            optimizer.zero_grad()
            loss = (module(trees[k * 5:(k + 1) * 5]) ** 2).sum()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
        runs.append((losses, {k: p.detach().clone() for k, p in parameters.items()}))
    (ours, ours_weights), (reference, reference_weights) = runs
    np.testing.assert_allclose(ours, reference, rtol=1e-5)
    _close(ours_weights.values(), reference_weights.values(), rtol=2e-5)    # (6 steps of rounding through the model)
    assert not torch.equal(ours_weights["emb"], torch.from_numpy(model.weights["emb"]))


def test_a_step_reaches_the_kernel_and_autograd_sees_it(sst):
    """The kernel writes the parameters' memory behind torch's back: the step counts as an in-place
    change (each parameter's and sum's `_version`), so the module's kernel path (under no_grad)
    takes the new weights, and a step between a forward and its backward is torch's error."""
    trees, vocab = sst
    model = ct.models.TreeLSTM(8, len(vocab), embed_size=12, seed=4)
    compiled = model.compile(training=True)
    module = compiled.as_torch()
    optimizer = Adagrad(module.parameters(), lr=0.1)
    with torch.no_grad():
        module(trees[:3])                                 # the kernel's weights made from the start ones
    (module(trees[:3]) ** 2).sum().backward()
    versions = [p._version for p in module.parameters()]
    optimizer.step()
    assert all(p._version > v for p, v in zip(module.parameters(), versions))
    assert all(s["sum"]._version > 0 for s in optimizer.state.values())
    with torch.no_grad():
        after = module(trees[:3]).numpy()
    moved = {name: p.detach().numpy() for name, p in module.named_parameters()}
    np.testing.assert_allclose(after, ct.models.TreeLSTM(8, len(vocab), embed_size=12).load_weights(moved)
                               .compile()(trees[:3]), rtol=1e-5, atol=1e-6)
    loss = (module(trees[:3]) ** 2).sum()
    optimizer.step()                                      # between the forward and its backward
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        loss.backward()


def test_the_marks_a_step_leaves():
    """A dense parameter is marked finite after a step whose probe sums are finite, not where they
    overflow (finite values near the float32 limit: checked as without a probe); a table updated by rows
    is marked only where the first step's scan of it found it finite (a NaN in a row no gradient reaches
    keeps it unmarked, its updated rows clean or not), and a step that updates none of its rows keeps its
    mark (its version unchanged)."""
    from cortex_tvm.weights import marked_finite
    plain, huge = torch.nn.Parameter(torch.randn(40, 30)), torch.nn.Parameter(torch.full((40, 30), 3e38))
    clean, spoilt = torch.nn.Parameter(torch.randn(50, 19)), torch.nn.Parameter(torch.randn(50, 19))
    with torch.no_grad():
        spoilt[7, 3] = float("nan")
    optimizer = Adagrad([plain, huge, clean, spoilt], lr=1e-3)

    def rows_grad(shape, rows):
        return torch.sparse_coo_tensor(torch.tensor([rows], dtype=torch.int64), torch.ones(len(rows), shape[1]),
                                       shape, check_invariants=False, is_coalesced=True)
    plain.grad, huge.grad = torch.ones(40, 30), torch.ones(40, 30)
    clean.grad, spoilt.grad = rows_grad((50, 19), [1, 2, 40]), rows_grad((50, 19), [1, 2, 40])
    optimizer.step()
    assert np.isfinite(huge.detach().numpy()).all()
    assert [marked_finite(p) for p in (plain, huge, clean, spoilt)] == [True, False, True, False]
    versions = [clean._version, spoilt._version]
    clean.grad, spoilt.grad = rows_grad((50, 19), []), rows_grad((50, 19), [3])
    optimizer.step()
    assert clean._version == versions[0] and spoilt._version > versions[1]
    assert [marked_finite(p) for p in (clean, spoilt)] == [True, False]


def test_what_a_step_found_finite_is_not_checked_again(sst, monkeypatch):
    """The loops sum the values they write (finite only where every one is): a parameter they found finite is
    marked so (`weights.mark_finite`), and the module's next forward checks none of its values, an
    embedding's rows at no batch either (its first step checks the whole table once).  A change torch
    counts (in place, under no_grad) voids the mark; a step that writes a NaN leaves none, and the
    next forward refuses it by name: a dense weight at once, an embedding's row when a batch reads it."""
    trees, vocab = sst
    model = ct.models.TreeLSTM(8, len(vocab), embed_size=12, seed=5)
    module = model.compile(training=True).as_torch(sparse=True)
    parameters = dict(module.named_parameters())
    optimizer = Adagrad([{"params": [p for k, p in parameters.items() if k != "emb"]},
                         {"params": [parameters["emb"]]}], lr=0.05)
    checked = []
    check_finite, check_rows = runtime.check_finite, vjp_calls.check_rows
    monkeypatch.setattr(runtime, "check_finite", lambda name, *a: (checked.append(name), check_finite(name, *a)))
    monkeypatch.setattr(vjp_calls, "check_rows", lambda *a: (checked.extend(sorted(a[3])), check_rows(*a)))

    def step(batch, spoil=None):
        optimizer.zero_grad()
        (module(batch) ** 2).sum().backward()
        if spoil is not None:
            spoil()
        optimizer.step()
    step(trees[:4])
    checked.clear()
    step(trees[4:8])
    step(trees[8:12])
    assert checked == []
    with torch.no_grad():
        module.U.mul_(1.0)
    step(trees[:4])
    assert checked == ["U"]
    read = {n.word for t in trees[:4] for n in ct.data.postorder(t) if n.word is not None}
    clean = next(k for k in range(12, len(trees)) if not read & {n.word for n in ct.data.postorder(trees[k])})

    def spoil_a_row():
        module.emb.grad._values()[0, 0] = float("nan")
    step(trees[:4], spoil_a_row)
    row = min(read)                       # (the gradient's rows are the batch's words, sorted)
    assert torch.isnan(module.emb[row, 0])
    checked.clear()
    step(trees[clean:clean + 1])            # reads no NaN row: runs, its rows checked
    assert checked == ["emb"]
    with pytest.raises(ValueError, match=rf"vjp: weight 'emb': row {row}, read by this batch, contains NaN"):
        module(trees[:4])
    with torch.no_grad():
        module.emb[row] = 0.0
    step(trees[:4], lambda: module.W.grad.__setitem__((1, 2), float("inf")))
    with pytest.raises(ValueError, match="weights_changed: weight 'W': contains NaN or infinity"):
        module(trees[:4])


def test_loops_built_for_another_cpu_step_as_torch():
    """target=: the loops of the model's ISA (AVX2 code here, as `bench --mcpu haswell` compiles the
    model), built once per target, the same steps as torch's; a GPU target is refused by name."""
    ours, reference = _twins([(61, 33), (5,)])
    optimizer = Adagrad(ours, lr=0.1, weight_decay=1e-3, target={"kind": "llvm", "mcpu": "haswell"})
    torch_optimizer = torch.optim.Adagrad(reference, lr=0.1, weight_decay=1e-3)
    assert "haswell" in optimizer._target and optimizer._target in optim._BUILT
    assert Adagrad(ours, target={"kind": "llvm", "mcpu": "haswell"})._target == optimizer._target
    generator = torch.Generator().manual_seed(5)
    for _ in range(3):
        for a, b in zip(ours, reference):
            a.grad = torch.randn(a.shape, generator=generator)
            b.grad = a.grad.clone()
        optimizer.step()
        torch_optimizer.step()
        _close(ours, reference)
    with pytest.raises(ValueError, match="target 'cuda': its loops are CPU code"):
        Adagrad(ours, target={"kind": "cuda", "arch": "sm_80"})


def test_bad_input_is_refused_before_any_update():
    with pytest.raises(ValueError, match="maximize=True is not supported"):
        Adagrad([torch.nn.Parameter(torch.ones(3))], maximize=True)
    first, last = torch.nn.Parameter(torch.ones(4)), torch.nn.Parameter(torch.ones(4, dtype=torch.float64))
    first.grad, last.grad = torch.ones(4), torch.ones(4, dtype=torch.float64)
    with pytest.raises(ValueError, match="parameter 1 of group 0: a float32 CPU tensor is needed, got torch.float64"):
        Adagrad([first, last]).step()
    assert torch.equal(first.detach(), torch.ones(4))                        # nothing updated
    table = torch.nn.Parameter(torch.zeros(10, 2))
    table.grad = torch.sparse_coo_tensor(torch.tensor([[1, 3]]), torch.ones(2, 2), (10, 2))
    with pytest.raises(ValueError, match="sparse gradient takes no weight_decay"):
        Adagrad([table], weight_decay=0.1).step()
    table.grad = torch.sparse_coo_tensor(torch.tensor([[1, 10]]), torch.ones(2, 2), (10, 2),
                                         check_invariants=False, is_coalesced=True)
    with pytest.raises(ValueError, match=r"inside \[0, 10\)"):
        Adagrad([table]).step()
    assert not table.detach().any()
    wide = torch.nn.Parameter(torch.zeros(4, 6)[:, ::2])
    wide.grad = torch.zeros(4, 3)
    with pytest.raises(ValueError, match="a contiguous tensor is needed"):
        Adagrad([wide]).step()
    flat = torch.nn.Parameter(torch.zeros(6))
    flat.grad = torch.zeros(6, 2)[:, 0]
    with pytest.raises(ValueError, match="parameter 0 of group 0's gradient: a contiguous tensor is needed"):
        Adagrad([flat]).step()


def test_a_parameter_whose_memory_changed_is_checked_again():
    """A step checks each parameter and its sum once, and again whenever either's memory, dtype,
    shape or strides changed (`Adagrad._memory`): a parameter given new memory of the right
    kind is stepped there, as torch's is; one of another dtype or not contiguous is refused."""
    ours, reference = _twins([(6, 5), (7,)], seed=3)
    optimizer, torch_optimizer = Adagrad(ours, lr=0.1), torch.optim.Adagrad(reference, lr=0.1)

    def step():
        for a, b in zip(ours, reference):
            a.grad = torch.full(a.shape, 0.25)
            b.grad = a.grad.clone()
        optimizer.step()
        torch_optimizer.step()
    step()
    for a, b in zip(ours, reference):                   # new memory, the same values
        a.data, b.data = a.data.clone() * 2, b.data.clone() * 2
    step()
    optimizer.load_state_dict(copy.deepcopy(torch_optimizer.state_dict()))    # new sums, the same values
    step()
    _close(ours, reference)
    square = torch.nn.Parameter(torch.arange(16.0).reshape(4, 4))
    square_optimizer = Adagrad([square], lr=0.1)
    square.grad = torch.ones(4, 4)
    square_optimizer.step()
    square.data = square.data.t()                       # the same memory, other strides
    with pytest.raises(ValueError, match="parameter 0 of group 0: a contiguous tensor is needed"):
        square_optimizer.step()
    kept = ours[0].data
    ours[0].data = kept.double()
    ours[0].grad = torch.zeros(6, 5, dtype=torch.float64)
    with pytest.raises(ValueError, match="parameter 0 of group 0: a float32 CPU tensor is needed, got torch.float64"):
        optimizer.step()
    ours[0].data = torch.zeros(5, 6).t()                  # (6, 5), not contiguous
    ours[0].grad = torch.zeros(6, 5)
    with pytest.raises(ValueError, match="parameter 0 of group 0: a contiguous tensor is needed"):
        optimizer.step()
