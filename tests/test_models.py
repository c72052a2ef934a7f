"""Compiled zoo models vs an independent float64 numpy reference (tests/reference.py),
weight loading, and input validation.  Every model is compiled once (see conftest)."""
import threading

import numpy as np
import pytest

import cortex_tvm as ct
from cortex_tvm.data import Node, chain_tree, postorder, random_trees

import reference as ref

TOL = 1e-4


def assert_close(got, want, tol=TOL):
    got = np.asarray(got)
    assert got.dtype == np.float32
    assert got.shape == np.shape(want), (got.shape, np.shape(want))
    assert np.all(np.isfinite(got))
    err = float(np.max(np.abs(got.astype(np.float64) - want))) if got.size else 0.0
    assert err <= tol, f"max abs diff {err:g} > {tol:g}"


def check_roots(z, trees):
    got = z.compiled(trees)
    assert isinstance(got, np.ndarray)
    assert_close(got, ref.roots(z.name, trees, z.weights))
    return got


_sst_ref = {}


def sst_reference(z, trees):
    if z.name not in _sst_ref:
        _sst_ref[z.name] = ref.roots(z.name, trees, z.weights)
    return _sst_ref[z.name]


# ---------------------------------------------------------------- numbers

@pytest.mark.parametrize("batch", [10, 64])
def test_sst_dev_all_trees(zoo, sst, batch):
    trees, _ = sst
    want = sst_reference(zoo, trees)
    got = np.concatenate([zoo.compiled(trees[i:i + batch]) for i in range(0, len(trees), batch)])
    assert_close(got, want)


def test_sst_one_big_batch(zoo, sst):
    trees, _ = sst
    assert_close(zoo.compiled(trees), sst_reference(zoo, trees))


def test_schedule_none_gives_same_numbers(zoo, zoo_none, sst):
    assert zoo.name == zoo_none.name
    trees = sst[0][:200]
    a, b = zoo.compiled(trees), zoo_none.compiled(trees)
    assert zoo_none.compiled.recipe_name == "none"
    np.testing.assert_allclose(a, b, atol=1e-5, rtol=0)
    assert_close(b, ref.roots(zoo.name, trees, zoo.weights))


def test_default_recipe_and_plan(zoo):
    """schedule=None derives the schedule from the program and the CPU (no hand recipe is the default)."""
    defaults = [r.name for r in ct.recipes.shipped().values()
                if r.default and r.model == zoo.name and r.target == "llvm"]
    assert defaults == []
    assert zoo.compiled.recipe_name == "derived"
    assert isinstance(zoo.compiled.plan, ct.schedule.RuntimePlan)
    assert isinstance(zoo.compiled.lowered, ct.lower.Lowered)
    assert not zoo.compiled.plan.per_level and len(zoo.compiled._functions) == 1


def test_random_trees(zoo):
    trees = random_trees(40, (1, 60), seed=3, vocab_size=zoo.vocab_size)
    check_roots(zoo, trees)


def test_single_leaf_tree(zoo):
    got = check_roots(zoo, [Node(word=7)])
    assert got.shape == (1, 32)


def test_batch_of_single_leaves(zoo):
    check_roots(zoo, [Node(word=w) for w in (0, 1, zoo.vocab_size - 1, 5)])


def test_batch_of_one(zoo, sst):
    tree = max(sst[0], key=lambda t: len(postorder(t)))
    check_roots(zoo, [tree])


def test_tuple_batch(zoo, sst):
    trees = tuple(sst[0][:5])
    assert_close(zoo.compiled(trees), ref.roots(zoo.name, trees, zoo.weights))


def test_numpy_int_word_ids(zoo):
    tree = Node(children=[Node(word=np.int64(3)), Node(word=np.int32(4))])
    check_roots(zoo, [tree])


def test_deep_chain_5000(zoo):
    tree = chain_tree(5000, seed=1, vocab_size=zoo.vocab_size)
    per_tree = zoo.compiled([tree], all_nodes=True)
    want = ref.all_h(zoo.name, [tree], zoo.weights)
    assert len(per_tree) == 1 and per_tree[0].shape == (10001, 32)
    assert_close(per_tree[0], want[0])
    assert_close(zoo.compiled([tree]), want[0][-1:])


def test_deep_chain_mixed_with_shallow_trees(zoo):
    trees = [Node(word=2), chain_tree(300, seed=2, vocab_size=zoo.vocab_size), Node(word=9)]
    trees += random_trees(5, (2, 10), seed=4, vocab_size=zoo.vocab_size)
    check_roots(zoo, trees)


def test_unary_internal_node(zoo):
    leaf = Node(word=11)
    unary = Node(children=[leaf])
    trees = [
        unary,                                                          # root with one child
        Node(children=[Node(children=[Node(word=3)]), Node(word=4)]),   # unary on the left
        Node(children=[Node(word=5), Node(children=[Node(word=6)])]),   # unary on the right
        Node(children=[Node(children=[Node(children=[Node(word=8)])])]),  # a unary chain
    ]
    check_roots(zoo, trees)
    # and a unary node is not the same as its child
    got = zoo.compiled([unary, Node(word=11)])
    assert np.max(np.abs(got[0] - got[1])) > 1e-3


def test_all_nodes_postorder(zoo, sst):
    trees = sst[0][:30] + [Node(word=1), Node(children=[Node(word=2)])]
    trees += random_trees(10, (1, 25), seed=5, vocab_size=zoo.vocab_size)
    per_tree = zoo.compiled(trees, all_nodes=True)
    want = ref.all_h(zoo.name, trees, zoo.weights)
    assert isinstance(per_tree, list) and len(per_tree) == len(trees)
    for tree, got, w in zip(trees, per_tree, want):
        assert got.shape == (len(postorder(tree)), 32)
        assert_close(got, w)
    # the last row of each tree is its root, as returned without all_nodes
    roots = zoo.compiled(trees)
    np.testing.assert_array_equal(np.stack([g[-1] for g in per_tree]), roots)


def test_same_tree_twice_in_batch(zoo, sst):
    tree = sst[0][17]
    other = sst[0][3]
    got = zoo.compiled([tree, other, tree])
    np.testing.assert_array_equal(got[0], got[2])
    assert_close(got, ref.roots(zoo.name, [tree, other, tree], zoo.weights))
    per_tree = zoo.compiled([tree, tree], all_nodes=True)
    np.testing.assert_array_equal(per_tree[0], per_tree[1])


def test_repeated_calls_identical(zoo, sst):
    trees = sst[0][:50]
    first = zoo.compiled(trees)
    # a bigger batch, a deep one and a tiny one in between reuse / grow the state buffers
    zoo.compiled(sst[0][:400])
    zoo.compiled([chain_tree(50, vocab_size=zoo.vocab_size)])
    zoo.compiled([Node(word=0)])
    second = zoo.compiled(trees)
    np.testing.assert_array_equal(first, second)
    assert first is not second
    first[:] = 0          # the result is the caller's: mutating it changes nothing
    np.testing.assert_array_equal(zoo.compiled(trees), second)


def test_all_nodes_results_are_not_aliased_to_buffers(zoo, sst):
    trees = sst[0][:5]
    a = zoo.compiled(trees, all_nodes=True)
    saved = [x.copy() for x in a]
    zoo.compiled(sst[0][100:200])
    for x, y in zip(a, saved):
        np.testing.assert_array_equal(x, y)


def test_threads_share_one_compiled_model(zoo, sst):
    batches = [sst[0][i * 20:(i + 1) * 20] for i in range(4)]
    want = [zoo.compiled(b) for b in batches]
    got, errors = [None] * 4, []

    def work(i):
        try:
            for _ in range(3):
                got[i] = zoo.compiled(batches[i])
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


# ---------------------------------------------------------------- weights

def _random_weights(model, seed):
    rng = np.random.default_rng(seed)
    return {k: (rng.standard_normal(v.shape) * 0.3).astype(np.float32) for k, v in model.weights.items()}


@pytest.mark.parametrize("name", ["TreeFC", "TreeLSTM"])
def test_load_weights_then_compile(name, sst):
    trees = sst[0][:20]
    model = getattr(ct.models, name)(hidden_size=32, vocab_size=len(sst[1]))
    old = {k: v.copy() for k, v in model.weights.items()}
    before = model.compile()
    new = _random_weights(model, seed=42)
    assert model.load_weights(new) is model
    after = model.compile()
    assert_close(after(trees), ref.roots(name, trees, new))
    # the model compiled earlier keeps the weights it was compiled with
    assert_close(before(trees), ref.roots(name, trees, old))


@pytest.mark.parametrize("name", ["TreeFC", "TreeLSTM"])
def test_load_weights_copies_callers_arrays(name, sst):
    """Like torch's load_state_dict: editing the caller's arrays afterwards changes nothing loaded."""
    trees = sst[0][:20]
    model = getattr(ct.models, name)(hidden_size=32, vocab_size=len(sst[1]))
    new = _random_weights(model, seed=43)
    model.load_weights(new)
    after = model.compile()
    out = after(trees)
    for v in new.values():
        v[...] = 0
    np.testing.assert_array_equal(after(trees), out)
    for k, v in new.items():
        assert not np.shares_memory(model.weights[k], v)


def test_compiled_model_keeps_weights_when_model_arrays_mutated(sst):
    """CompiledModel's docstring: "Weights are copied in at compile time"."""
    trees = sst[0][:10]
    model = ct.models.TreeFC(hidden_size=32, vocab_size=len(sst[1]))
    compiled = model.compile()
    out = compiled(trees)
    model.weights["W"][...] = 0.0
    np.testing.assert_array_equal(compiled(trees), out)


def test_seeded_weights_are_deterministic(sst):
    a = ct.models.TreeLSTM(hidden_size=32, vocab_size=50)
    b = ct.models.TreeLSTM(hidden_size=32, vocab_size=50)
    c = ct.models.TreeLSTM(hidden_size=32, vocab_size=50, seed=1)
    for k in a.weights:
        assert a.weights[k].dtype == np.float32
        np.testing.assert_array_equal(a.weights[k], b.weights[k])
    assert any(not np.array_equal(a.weights[k], c.weights[k]) for k in a.weights)


@pytest.mark.parametrize("name", ["TreeFC", "TreeLSTM"])
def test_load_weights_aliases(name):
    model = getattr(ct.models, name)(hidden_size=32, vocab_size=60)
    new = _random_weights(model, seed=7)
    inverse = {ours: theirs for theirs, ours in model.aliases.items()}
    assert set(inverse) == set(model.weights), "every weight has a state_dict alias"
    state_dict = {inverse[k]: v for k, v in new.items()}
    model.load_weights(state_dict)
    for k, v in new.items():
        np.testing.assert_array_equal(model.weights[k], v)
    trees = random_trees(8, (1, 12), seed=1, vocab_size=60)
    assert_close(model.compile()(trees), ref.roots(name, trees, new))


def test_tree_lstm_aliases_are_pytorch_names():
    assert ct.models.TreeLSTM.aliases == {"emb.weight": "emb", "W.weight": "W", "W.bias": "bW",
                                         "U.weight": "U", "U.bias": "bU"}
    assert ct.models.TreeFC.aliases == {"emb.weight": "emb", "W.weight": "W", "W.bias": "b"}


class _FakeTensor:
    """Duck-types the bits of torch.Tensor that load_weights uses."""

    def __init__(self, array):
        self._array = array

    def detach(self):
        return self

    def cpu(self):
        return self

    def numpy(self):
        return self._array


def test_load_weights_tensor_like_objects():
    model = ct.models.TreeFC(hidden_size=32, vocab_size=60)
    new = _random_weights(model, seed=8)
    model.load_weights({k: _FakeTensor(v) for k, v in new.items()})
    for k, v in new.items():
        np.testing.assert_array_equal(model.weights[k], v)


@pytest.mark.parametrize("name", ["TreeFC", "TreeLSTM"])
def test_load_weights_torch(name):
    torch = pytest.importorskip("torch")
    model = getattr(ct.models, name)(hidden_size=32, vocab_size=60)
    new = _random_weights(model, seed=9)
    model.load_weights({k: torch.from_numpy(v.copy()) for k, v in new.items()})
    trees = random_trees(8, (1, 12), seed=1, vocab_size=60)
    assert_close(model.compile()(trees), ref.roots(name, trees, new))
    inverse = {ours: theirs for theirs, ours in model.aliases.items()}
    model.load_weights({inverse[k]: torch.from_numpy(v.copy()).requires_grad_(True) for k, v in new.items()})
    with pytest.raises(TypeError, match="dtype"):
        model.load_weights({k: torch.from_numpy(v.astype(np.float64)) for k, v in new.items()})


def _bad_weight_cases():
    def base():
        m = ct.models.TreeLSTM(hidden_size=32, vocab_size=60)
        return {k: v.copy() for k, v in m.weights.items()}

    missing = base(); del missing["U"]
    extra = base(); extra["V"] = np.zeros(3, np.float32)
    shape = base(); shape["W"] = np.zeros((96, 31), np.float32)
    transposed = base(); transposed["U"] = np.ascontiguousarray(transposed["U"].T)
    f64 = base(); f64["bU"] = f64["bU"].astype(np.float64)
    ints = base(); ints["emb"] = np.zeros((60, 32), np.int32)
    f16 = base(); f16["W"] = f16["W"].astype(np.float16)
    listy = base(); listy["bW"] = listy["bW"].tolist()
    nan = base(); nan["bU"][3] = np.nan
    return [
        ("missing", missing, ValueError, "missing"),
        ("extra", extra, ValueError, "unexpected"),
        ("shape", shape, ValueError, "shape"),
        ("transposed", transposed, ValueError, "shape"),
        ("float64", f64, TypeError, "dtype"),
        ("int", ints, TypeError, "dtype"),
        ("float16", f16, TypeError, "dtype"),
        ("list", listy, TypeError, "numpy"),
        ("nan", nan, ValueError, "NaN"),
        ("not a dict", [("emb", 1)], TypeError, "dict"),
        ("none", None, TypeError, "dict"),
        ("array", np.zeros(3, np.float32), TypeError, "dict"),
    ]


@pytest.mark.parametrize("case", _bad_weight_cases(), ids=lambda c: c[0])
def test_load_weights_rejects(case):
    _, weights, exc, match = case
    model = ct.models.TreeLSTM(hidden_size=32, vocab_size=60)
    before = {k: v.copy() for k, v in model.weights.items()}
    with pytest.raises(exc, match=match):
        model.load_weights(weights)
    # a failed load leaves the model's weights untouched
    for k, v in before.items():
        np.testing.assert_array_equal(model.weights[k], v)


def test_model_constructor_rejects_bad_sizes():
    for bad in (0, -1, 2.0, True, None):
        with pytest.raises(ValueError, match="hidden_size"):
            ct.models.TreeFC(hidden_size=bad, vocab_size=10)
        with pytest.raises(ValueError, match="vocab_size"):
            ct.models.TreeLSTM(hidden_size=8, vocab_size=bad)


# ---------------------------------------------------------------- bad trees

def test_node_needs_a_word_or_children():
    assert Node(word=1, children=[Node(word=2)]).word == 1      # a word on an inner node is allowed
    with pytest.raises(ValueError, match="needs a word=, children=, or both"):
        Node()
    with pytest.raises(ValueError, match="empty"):
        Node(children=[])
    with pytest.raises(TypeError, match="word"):
        Node(word="cat")
    with pytest.raises(TypeError, match="Node"):
        Node(children=[Node(word=1), 3])


@pytest.fixture
def no_kernel(monkeypatch):
    """Fail the test if a kernel runs: bad input must be rejected before any kernel call."""
    def install(compiled):
        def forbidden(*args):
            raise AssertionError("the kernel ran on bad input")
        assert compiled._functions and all(callable(f) for f in compiled._functions)
        monkeypatch.setattr(compiled, "_functions", [forbidden] * len(compiled._functions))
        return compiled
    return install


def _cycle():
    a = Node(word=1)
    inner = Node(children=[a, Node(word=2)])
    root = Node(children=[inner, Node(word=3)])
    inner.children[0] = root          # root -> inner -> root
    return root


def _shared():
    shared = Node(children=[Node(word=1), Node(word=2)])
    return Node(children=[shared, shared])


def _shared_leaf():
    leaf = Node(word=4)
    return Node(children=[Node(children=[leaf, Node(word=5)]), leaf])


def _self_loop():
    n = Node(children=[Node(word=1), Node(word=2)])
    n.children[1] = n
    return n


def _bad_batches(V):
    three = Node(children=[Node(word=1), Node(word=2), Node(word=3)])
    deep_three = Node(children=[Node(word=0), Node(children=[Node(word=1), Node(word=2), Node(word=3)])])
    return [
        ("three children", [three], ValueError, "children"),
        ("three children deep", [Node(word=1), deep_three], ValueError, "children"),
        ("cycle", [_cycle()], ValueError, "cycle"),
        ("self loop", [_self_loop()], ValueError, "cycle"),
        ("shared subtree", [_shared()], ValueError, "shared"),
        ("shared leaf", [_shared_leaf()], ValueError, "shared"),
        ("empty batch", [], ValueError, "empty"),
        ("negative word", [Node(children=[Node(word=-1), Node(word=2)])], ValueError, "vocabulary"),
        ("word == vocab size", [Node(children=[Node(word=1), Node(word=V)])], ValueError, "vocabulary"),
        ("huge word", [Node(word=2 ** 40)], ValueError, "vocabulary"),
        ("not a node", [Node(word=1), "tree"], TypeError, "Node"),
        ("single node, not a list", Node(word=1), TypeError, "list"),
        ("none", None, TypeError, "list"),
    ]


@pytest.mark.parametrize("case", _bad_batches(5374), ids=lambda c: c[0])
def test_bad_batches_raise_before_kernel(zoo, no_kernel, case, sst):
    _, trees, exc, match = case
    assert zoo.vocab_size == len(sst[1]) == 5374
    compiled = no_kernel(zoo.compiled)
    with pytest.raises(exc, match=match):
        compiled(trees)
    with pytest.raises(exc, match=match):
        compiled(trees, all_nodes=True)


def test_model_still_works_after_bad_input(zoo, sst):
    trees = sst[0][:8]
    good = zoo.compiled(trees)
    for bad in ([_cycle()], [_shared()], [], [Node(word=-3)]):
        with pytest.raises(ValueError):
            zoo.compiled(bad)
    np.testing.assert_array_equal(zoo.compiled(trees), good)


def test_edited_tree_is_recomputed(zoo):
    """A tree edited after a call must not use a stale cached layout."""
    left = Node(word=1)
    tree = Node(children=[left, Node(word=2)])
    zoo.compiled([tree])
    left.word = 3
    check_roots(zoo, [tree])
    tree.children.append(Node(word=4))
    with pytest.raises(ValueError, match="children"):
        zoo.compiled([tree])
    tree.children.pop()
    tree.children[1] = Node(children=[Node(word=5), Node(word=6)])
    check_roots(zoo, [tree])


def test_reference_agrees_on_package_executor(zoo, sst):
    """Sanity of the test oracle itself: the package's numpy executor agrees with it too."""
    trees = sst[0][:50]
    np.testing.assert_allclose(zoo.model.reference(trees), ref.roots(zoo.name, trees, zoo.weights),
                               atol=TOL, rtol=0)
