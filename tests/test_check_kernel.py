"""cortex_check, the compiled twin of linearize.check_bounds: in every CPU module, status 0 on
valid layouts, the code of the first broken invariant otherwise, and run() then raising
check_bounds' ValueError that names it."""
import dataclasses

import numpy as np
import pytest

import cortex_tvm as ct
from cortex_tvm import check_kernel
from cortex_tvm.plan import CHECK_FUNC

from padded import compile_padded

V = 40


@pytest.fixture(scope="module")
def lstm():
    """TreeLSTM with hoisted leaf tables (leaf words checked) and node tiles > 1."""
    model = ct.models.TreeLSTM(hidden_size=16, vocab_size=V)
    compiled = compile_padded(model)
    assert compiled.plan.hoisted and compiled.plan.node_tile > 1
    return compiled


@pytest.fixture(scope="module")
def trees(sst):
    return [ct.data.fold_words(t, V) for t in sst[0][:6]]


def status_of(compiled, lin):
    status = compiled.compiled_check_status(lin)
    assert status is not None, "the compiled check does not apply to these arrays"
    return status


def edited(lin, name, index, value):
    array = np.array(getattr(lin, name))
    array[index] = value
    return dataclasses.replace(lin, **{name: array})


def test_every_cpu_module_has_it(lstm):
    assert lstm.executable.mod.implements_function(CHECK_FUNC) and lstm._check_kernel is not None


def test_valid_layouts_pass(lstm, trees):
    child_sum = ct.models.ChildSumTreeLSTM(16, V, max_children=3).compile()      # inner words, no_word
    dependency = ct.data.Node(word=1, children=[ct.data.Node(word=0), ct.data.Node(word=2)])
    for compiled, batch in ((lstm, trees), (lstm, trees[:1]), (child_sum, trees + [dependency])):
        lin = compiled.linearize(batch)
        assert status_of(compiled, lin) == 0
        compiled.run(lin)


def test_each_invariant_has_its_code_and_run_names_it(lstm, trees):
    lin = lstm.linearize(trees)
    lo = lin.level_offsets
    leaf, parent = int(lo[0]), int(lo[1])           # the first leaf slot, the first slot of level 1
    cases = [
        (edited(lin, "level_offsets", 1, lo[2] + 1), check_kernel.LEVELS, "never decrease"),
        (edited(lin, "level_offsets", 1, lo[1] - 1), check_kernel.NODE_TILE, "node tile"),
        (edited(lin, "roots", 0, lin.num_slots), check_kernel.ROOTS, "roots out of bounds"),
        (edited(lin, "num_children", parent, 3), check_kernel.NUM_CHILDREN, "num_children out of bounds"),
        (edited(lin, "words", parent, V + 5), check_kernel.WORDS, "words out of bounds"),
        (edited(lin, "children", (parent, 0), parent), check_kernel.CHILDREN, "not in an earlier level"),
        (edited(lin, "children", (parent, 1), -4), check_kernel.CHILDREN, "children out of bounds"),
        (edited(lin, "children", (leaf, 0), leaf), check_kernel.CHILDREN, "not in an earlier level"),
    ]
    for bad, code, message in cases:
        assert status_of(lstm, bad) == code, message
        with pytest.raises(ValueError, match=message):
            lstm.run(bad)
    # a leaf word outside the vocabulary: the WORDS rule finds it first
    assert status_of(lstm, edited(lin, "words", leaf, -1)) == check_kernel.WORDS


def test_a_leaf_without_a_word_where_leaves_are_tables(trees):
    """A model that reads words on inner nodes allows its no-word marker in `words`, but a leaf's
    state is read from a table by its word: the marker at a leaf is LEAF_WORDS."""
    child_sum = ct.models.ChildSumTreeLSTM(16, V, max_children=3).compile()
    assert child_sum.plan.hoisted and child_sum.signature.no_word == V
    lin = child_sum.linearize(trees)
    inner = edited(lin, "words", int(lin.level_offsets[1]), V)         # an inner node without a word: fine
    assert status_of(child_sum, inner) == 0
    bad = edited(lin, "words", int(lin.level_offsets[0]), V)           # a leaf without a word
    assert status_of(child_sum, bad) == check_kernel.LEAF_WORDS
    with pytest.raises(ValueError, match="a leaf slot holds 40, outside the vocabulary"):
        child_sum.run(bad)


def test_arrays_it_cannot_read_go_to_numpy(lstm, trees):
    lin = lstm.linearize(trees)
    for bad in (dataclasses.replace(lin, children=lin.children.astype(np.int64)),
                dataclasses.replace(lin, children=np.asfortranarray(lin.children)),
                dataclasses.replace(lin, level_offsets=lin.level_offsets[:1]),
                dataclasses.replace(lin, roots=lin.roots[:0])):
        assert not lstm._checkable(bad)
    with pytest.raises(ValueError, match="children out of bounds: expected int32"):
        lstm.run(dataclasses.replace(lin, children=lin.children.astype(np.int64)))
    with pytest.raises(ValueError, match="children.strides"):      # valid in numpy; TVM wants compact arrays
        lstm.run(dataclasses.replace(lin, children=np.asfortranarray(lin.children)))


def test_a_loaded_export_keeps_it(lstm, trees, tmp_path):
    loaded = ct.load(lstm.export(tmp_path / "lstm"))
    assert loaded._check_kernel is not None
    with pytest.raises(ValueError, match="roots out of bounds"):
        loaded.run(edited(loaded.linearize(trees), "roots", 0, -1))
