"""hoist: leaf states become lookups in per-word tables, which the module's parameter
transform function computes once when the model is compiled or loaded."""
import numpy as np
import pytest

import cortex_tvm as ct
from cortex_tvm import ra
from cortex_tvm.models.numpy_cells import sigmoid
from cortex_tvm.runtime import kernel_weights, model_weight_arrays

from .irutil import block_names, find_block, loads, param, shape, stores, trace_names

H = 32


@pytest.mark.parametrize("name, states", [("TreeLSTM", ["h", "c"]), ("TreeFC", ["h"])])
def test_ir_before_and_after(fresh, vocab_size, name, states):
    rs = fresh(name).specialize_leaves()
    before = rs.func
    leaves_before = block_names(find_block(before, "leaves").body)
    assert "emb" in [p.name for p in before.params]
    assert loads(find_block(before, "leaves"), "emb")

    assert rs.hoist() is rs
    func = rs.func
    leaves = find_block(func, "leaves")
    assert block_names(leaves.body) == [f"{s}_leaf" for s in states]
    assert leaves_before != block_names(leaves.body)
    params = [p.name for p in func.params]
    for s in states:
        table = param(func, f"{s}_table")
        assert shape(table) == (vocab_size, H)
        # state[level_offsets[0] + j, i] = table[word[level_offsets[0] + j], i]
        (store,) = stores(find_block(func, f"{s}_leaf").body, s)
        (ld,) = loads(store.value, f"{s}_table")
        assert loads(ld.indices[0], "word")
    # the leaf computation is gone: no embedding (nor the leaf-only W of TreeLSTM) is read any more
    assert "emb" not in params and not loads(func, "emb")
    if name == "TreeLSTM":
        assert "W" not in params and "bW" not in params
    # the level loop is untouched
    assert block_names(find_block(func, "level").body) == block_names(find_block(before, "level").body)
    assert rs.plan.hoisted == tuple((s, f"{s}_table") for s in states)
    # the leaf computation moved to the transform function beside the kernel, over the vocabulary:
    # the same blocks as the leaves had, a word's row at the word itself (no word array)
    transform = rs.transform_func
    assert [p.name for p in transform.params][-len(states):] == [f"{s}_table" for s in states]
    assert block_names(find_block(transform, "tables").body) == leaves_before
    for s in states:
        (store,) = stores(transform, f"{s}_table")
        assert str(store.indices[0]).startswith("v_i0")
    assert not loads(transform, "word") and loads(transform, "emb")
    assert sorted(gv.name_hint for gv in rs.module().functions) == ["cortex_check", "cortex_main", "cortex_transform_params"]
    assert trace_names(rs) == ["specialize_leaves", "hoist"]
    assert rs.trace[-1].args == {"budget_mb": 64.0}


def test_preconditions(fresh):
    with pytest.raises(ct.ScheduleError, match=r"apply specialize_leaves\(\) first"):
        fresh("TreeLSTM").hoist()
    rs = fresh("TreeLSTM").specialize_leaves()
    # TreeLSTM at H=32 over the SST vocabulary: 5374 x 64 floats = 1.3 MB
    with pytest.raises(ct.ScheduleError, match="over the budget of 1 MB"):
        rs.hoist(budget_mb=1)
    for bad in (0, -1):
        with pytest.raises(ct.ScheduleError, match="budget_mb must be a positive number"):
            rs.hoist(budget_mb=bad)
    for bad in ("64", None, True):
        with pytest.raises(ct.ScheduleError, match="hoist: argument 'budget_mb' must be float"):
            rs.hoist(budget_mb=bad)
    assert not rs.plan.hoisted and rs.has_block("leaf_gates_sum")
    rs.fast_math()
    with pytest.raises(ct.ScheduleError, match="must come before"):
        rs.hoist()
    rs = fresh("TreeFC").specialize_leaves().hoist()
    with pytest.raises(ct.ScheduleError, match="must come before"):     # already hoisted
        rs.hoist()


class TwoInputs(ct.models.Model):
    """Leaf h = emb[word] + emb[tag]: two per-node inputs, so the leaf is not a function of one word."""

    vocab_size = 10

    def weight_shapes(self):
        return {"emb": (10, 8), "b": (8,)}

    def build_program(self):
        n = ra.node()
        word, tag = ra.node_input("word", bound=10), ra.node_input("tag", bound=10)
        emb, b = ra.weight("emb", (10, 8)), ra.weight("b", (8,))
        h = ra.rec_placeholder("h", (8,))
        leaf = ra.compute((8,), lambda i: emb[word[n], i] + emb[tag[n], i], name="leaf_h")
        internal = ra.compute((8,), lambda i: ra.tanh(h[ra.child(n, 0), i] + h[ra.child(n, 1), i] + b[i]),
                              name="internal_h")
        return ra.rec_compute(ra.Tree(2), {h: (leaf, internal)})


def test_needs_exactly_one_node_input():
    rs = ct.RecSchedule(TwoInputs().lower(specialize_leaves=False)).specialize_leaves()
    with pytest.raises(ct.ScheduleError, match="exactly one per-node input.*'word', 'tag'"):
        rs.hoist()


@pytest.mark.parametrize("name", ["TreeLSTM", "TreeFC"])
def test_same_numbers(check_numbers, name, batches):
    compiled = check_numbers(name, lambda rs: (rs.specialize_leaves(), rs.hoist()))
    assert compiled.plan.hoisted
    plain = check_numbers(name, lambda rs: rs.specialize_leaves())
    for batch in batches:
        np.testing.assert_allclose(compiled(batch), plain(batch), atol=1e-5, rtol=0)


def test_same_numbers_with_later_primitives(check_numbers):
    """The tables are computed by the same recipe minus hoist (the blocks hoist removed are skipped)."""
    def recipe(rs):
        rs.specialize_leaves()
        rs.hoist()
        rs.fast_math()
        rs.vectorize_block("internal_h")
        rs.vectorize_block("h_leaf")
    compiled = check_numbers("TreeLSTM", recipe)
    assert compiled.plan.hoisted == (("h", "h_table"), ("c", "c_table"))


def test_tables_are_the_leaf_states_of_every_word(vocab_size):
    """The transform function's tables against numpy's TreeLSTM leaf, word by word."""
    model = ct.models.TreeLSTM(hidden_size=H, vocab_size=vocab_size)
    rs = ct.RecSchedule(model.lower(specialize_leaves=False)).specialize_leaves().hoist()
    rs.pack("W", axis=0, tile=16, groups=3)          # the tables read the packed W: packing runs first
    before = ct.compile_count()
    compiled = rs.build(model)
    assert ct.compile_count() == before + 1           # one module: no second build for the tables
    w = model.weights
    i, o, u = np.split(w["emb"] @ w["W"].T + w["bW"], 3, axis=1)
    c = sigmoid(i) * np.tanh(u)
    h = sigmoid(o) * np.tanh(c)
    args = dict(zip([n for n, _, _ in compiled.signature.weights],
                    kernel_weights(compiled.executable, compiled.signature, compiled.model_weights)))
    np.testing.assert_allclose(args["h_table"], h, atol=1e-5, rtol=0)
    np.testing.assert_allclose(args["c_table"], c, atol=1e-5, rtol=0)


def test_export_keeps_model_weights_and_load_recomputes_the_tables(sst, tmp_path):
    """An export holds the model's weights; load runs the transforms, so other weights in the
    model's layout work for a hoisted, packed schedule too."""
    trees, vocab = sst
    model = ct.models.TreeLSTM(hidden_size=H, vocab_size=len(vocab))
    compiled = model.compile()
    assert compiled.plan.hoisted and compiled.plan.packs
    path = compiled.export(tmp_path / "m")
    batch = trees[:30]
    np.testing.assert_allclose(ct.load(path)(batch), compiled(batch), atol=1e-6, rtol=0)
    other = ct.models.TreeLSTM(hidden_size=H, vocab_size=len(vocab), seed=7)
    loaded = ct.load(path, weights=other.weights)
    np.testing.assert_allclose(loaded(batch), other.reference(batch), atol=1e-4, rtol=0)
    assert not np.allclose(loaded(batch), compiled(batch), atol=1e-3)
    with pytest.raises(ValueError, match="missing weights.*emb"):
        ct.load(path, weights={k: v for k, v in other.weights.items() if k != "emb"})
