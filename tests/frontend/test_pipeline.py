"""A traced cell goes through the rest of the pipeline like a zoo model: export/load, Relax,
per-node states, all at H=16."""
import dataclasses

import numpy as np
import tvm
from tvm import relax

import cortex_tvm as ct
from cortex_tvm.frontend import TracedModel

from . import cells

H, V = 16, 30
TREES = ct.data.random_trees(7, (1, 25), seed=9, vocab_size=V)


def _weights():
    return ct.models.TreeGRU(hidden_size=H, vocab_size=V, seed=4).weights


def test_export_and_load(tmp_path):
    compiled = ct.compile(cells.tree_gru, weights=_weights())
    compiled.export(tmp_path / "gru")
    loaded = ct.load(tmp_path / "gru")
    assert loaded.model_name == "TracedModel"
    np.testing.assert_array_equal(loaded(TREES), compiled(TREES))


def test_relax_embedding():
    model = TracedModel(cells.tree_gru, _weights())
    mod, make_inputs = model.as_relax("llvm")
    vm = relax.VirtualMachine(tvm.compile(mod, target=ct.make_target("llvm"), tir_pipeline=ct.TIR_PIPELINE), tvm.cpu())
    got = vm["main"](*make_inputs(TREES)).numpy()
    np.testing.assert_allclose(got, model.reference(TREES), atol=1e-5, rtol=0)


def test_traced_model_describes_itself():
    model = TracedModel(cells.tree_lstm, ct.models.TreeLSTM(hidden_size=H, vocab_size=V).weights)
    assert repr(model) == "TracedModel(tree_lstm: states h(16,), c(16,), max_children=2)"
    assert (model.hidden_size, model.vocab_size, model.embed_size, model.max_children) == (H, V, H, 2)
    assert [s.name for s in model.program.states] == ["h", "c"]


def test_ra_text_of_the_traced_tree_lstm_is_the_zoo_program():
    zoo = ct.models.TreeLSTM(hidden_size=H, vocab_size=V)
    text = ct.frontend.ra_text(TracedModel(cells.tree_lstm, zoo.weights).program)
    assert text == ct.frontend.ra_text(zoo.program)
    gates = "  gates[g, i] = sum[j<2, k<16](U[g * 16 + i, j * 16 + k] * h[children[n, j], k]) + bU[g * 16 + i]"
    assert gates in text
    assert "  internal_h[i] = sigmoid(gates[n, 3, i]) * tanh(internal_c[n, i])" in text


def test_cuda_code_of_the_traced_tree_lstm_is_the_zoo_code():
    """CUDA codegen (no GPU needed): the cell compiled with the zoo's CUDA recipe gives the zoo's
    kernel source, character for character.  The recipe's optional `hoist` step is left out: its
    leaf tables are computed by a CPU build (tested on the CPU in test_zoo_cells.py)."""
    from cortex_tvm import recipes
    shipped = recipes.shipped()["treelstm_cuda"]
    recipe = dataclasses.replace(shipped, steps=tuple(s for s in shipped.steps if s["primitive"] != "hoist"))
    zoo = ct.models.TreeLSTM(hidden_size=32, vocab_size=V, seed=1)
    theirs = zoo.compile(target="cuda", schedule=recipe)
    mine = ct.compile(cells.tree_lstm, weights=zoo.weights, target="cuda", schedule=recipe)
    assert "__global__" in mine.inspect_source()
    assert mine.inspect_source() == theirs.inspect_source()
