"""Zoo models written again as @ct.recursive cells equal the zoo models with the same weights.

Each cell is compiled once per module with its default schedule and compared
with the zoo model compiled with its own default schedule, and with the zoo's
numpy executor.  The TreeLSTM and TreeFC cells trace to the very PrimFunc the
zoo models lower to, so the zoo's tuned recipes apply to them as they are.
"""
import numpy as np
import pytest
import tvm

import cortex_tvm as ct
from cortex_tvm.build import schedule_model
from cortex_tvm.frontend import TracedModel

from . import cells

H, V = 16, 60
TOL = 1e-5


def _nary_trees(count, max_children, seed):
    """Random trees with 1..max_children children per inner node (unary nodes included)."""
    rng = np.random.default_rng(seed)
    trees = []
    for _ in range(count):
        items = [ct.data.Node(word=int(w)) for w in rng.integers(0, V, int(rng.integers(1, 25)))]
        while len(items) > 1:
            k, i = int(rng.integers(1, max_children + 1)), int(rng.integers(0, len(items)))
            items[i:i + k] = [ct.data.Node(children=items[i:i + k])]
        trees.append(items[0])
    return trees


BINARY = ct.data.random_trees(12, (1, 30), seed=3, vocab_size=V) + _nary_trees(6, 2, seed=4)
CASES = {   # zoo class, cell, its keyword arguments, max_children, trees
    "TreeFC": (ct.models.TreeFC, cells.tree_fc, {}, 2, BINARY),
    "TreeLSTM": (ct.models.TreeLSTM, cells.tree_lstm, {}, 2, BINARY),
    "TreeGRU": (ct.models.TreeGRU, cells.tree_gru, {}, 2, BINARY),
    "ChildSumTreeLSTM": (ct.models.ChildSumTreeLSTM, cells.child_sum_lstm, {"max_children": 4}, 4,
                         _nary_trees(14, 4, seed=5)),
}


@pytest.fixture(scope="module", params=sorted(CASES))
def pair(request):
    """(zoo model, its compiled form, the cell compiled with the zoo's weights, trees)."""
    zoo_class, cell, kwargs, max_children, trees = CASES[request.param]
    zoo = zoo_class(hidden_size=H, vocab_size=V, seed=7, **kwargs)
    compiled = ct.compile(cell, weights=zoo.weights, max_children=max_children, target="llvm")
    return zoo, zoo.compile(target="llvm"), compiled, trees


def test_cell_equals_zoo_model(pair):
    zoo, zoo_compiled, compiled, trees = pair
    roots = compiled(trees)
    assert roots.shape == (len(trees), H) and roots.dtype == np.float32
    np.testing.assert_allclose(roots, zoo_compiled(trees), atol=TOL, rtol=0)
    np.testing.assert_allclose(roots, zoo.reference(trees), atol=TOL, rtol=0)


def test_cell_equals_zoo_model_at_every_node(pair):
    zoo, zoo_compiled, compiled, trees = pair
    for mine, theirs in zip(compiled(trees, all_nodes=True), zoo_compiled(trees, all_nodes=True)):
        np.testing.assert_allclose(mine, theirs, atol=TOL, rtol=0)


def test_numpy_reference_of_the_trace_equals_the_zoo_executor(pair):
    zoo, _, compiled, trees = pair
    traced = TracedModel(CASES[type(zoo).__name__][1], zoo.weights, zoo.max_children)
    np.testing.assert_allclose(traced.reference(trees), zoo.reference(trees), atol=1e-6, rtol=0)


@pytest.mark.parametrize("name", ["TreeFC", "TreeLSTM"])
@pytest.mark.parametrize("specialize", [True, False])
def test_cell_traces_to_the_zoo_program(name, specialize):
    """Same PrimFunc as the hand-written RA model: same stages, names, indexing."""
    zoo_class, cell, _, max_children, _ = CASES[name]
    zoo = zoo_class(hidden_size=H, vocab_size=V)
    traced = TracedModel(cell, zoo.weights, max_children)
    tvm.ir.assert_structural_equal(traced.lower(specialize_leaves=specialize).func,
                                   zoo.lower(specialize_leaves=specialize).func)


def test_zoo_recipe_applies_to_the_traced_tree_lstm():
    """The TreeLSTM recipe (hoist, pack with gate groups, tile_gemm on gates_sum, ...) applies to
    the cell step for step, optional steps included, and gives the same numbers."""
    zoo = ct.models.TreeLSTM(hidden_size=H, vocab_size=V, seed=2)
    traced = TracedModel(cells.tree_lstm, zoo.weights)
    target = ct.make_target("llvm")
    applied = [[s.as_json() for s in schedule_model(m, target, "treelstm_llvm")[0].trace] for m in (zoo, traced)]
    assert applied[0] == applied[1]
    assert {"hoist", "pack", "tile_gemm"} <= {step["primitive"] for step in applied[1]}
    compiled = ct.compile(cells.tree_lstm, weights=zoo.weights, schedule="treelstm_llvm")
    assert compiled.recipe_name == "treelstm_llvm"
    np.testing.assert_allclose(compiled(BINARY), zoo.reference(BINARY), atol=TOL, rtol=0)
    # the same machine code as the zoo model's: it runs exactly as fast
    assert compiled.inspect_source() == zoo.compile(schedule="treelstm_llvm").inspect_source()


@pytest.mark.parametrize("name", sorted(CASES))
def test_cell_at_odd_sizes_is_padded_like_the_zoo_model(name):
    """H=37, E=21 (TreeFC: E=H): the cell's weight axes are read off its extents and confirmed by tracing at
    other sizes, so it is padded to the vector width as the zoo model is (the same kernel
    shape, the register-tiled fast path) and the padding is sliced off."""
    zoo_class, cell, kwargs, max_children, trees = CASES[name]
    sizes = {} if name == "TreeFC" else {"embed_size": 21}        # TreeFC's leaf h is its embedding
    zoo = zoo_class(hidden_size=37, vocab_size=V, seed=5, **sizes, **kwargs)
    compiled = ct.compile(cell, weights=zoo.weights, max_children=max_children)
    zoo_compiled = zoo.compile()
    assert compiled.signature.states == zoo_compiled.signature.states
    assert compiled.signature.states[0][1] != (37,)
    roots = compiled(trees)
    assert roots.shape == (len(trees), 37)
    np.testing.assert_allclose(roots, zoo.reference(trees), atol=TOL, rtol=0)


def test_a_state_that_is_not_one_hidden_block_keeps_its_sizes():
    """A cell whose second state is [h; h] (2H) cannot be sliced back after padding: fixed shapes."""
    @ct.recursive
    def doubled(node, p):
        if node.is_leaf:
            h = p.emb[node.word]
        else:
            h = ct.tanh(p.W @ (doubled(node.children[0], p)[0] + doubled(node.children[1], p)[0]) + p.b)
        return h, ct.concat([h, h])

    zoo = ct.models.TreeFC(hidden_size=37, vocab_size=V)
    model = TracedModel(doubled, zoo.weights)
    assert model._axes is None and model.weight_shapes() == {k: v.shape for k, v in zoo.weights.items()}
    np.testing.assert_allclose(ct.compile(doubled, weights=zoo.weights)(BINARY), zoo.reference(BINARY),
                               atol=TOL, rtol=0)
