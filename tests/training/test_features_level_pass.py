"""The compiled backward of models fed per-node features (`ra.node_features`): each node adds
its adjoint into its own row of the features' gradient (a sink like a child's state, at the
node's own slot), so the compiled pass takes these programs too.  Its gradients, of every
weight and of the features, must be the numpy backward's for every zoo model that takes
features, on the forward's kept values and with the recomputation, with an adjoint on every
state of every node; the numpy backward is itself checked against central differences
(tests/test_node_features_training.py, which now runs through the compiled pass)."""
import pytest

import cortex_tvm as ct
from cortex_tvm import adjoint_kernel, lower
from cortex_tvm.adjoint import Adjoint
from cortex_tvm.bench.cases import FEATURE_MODELS, structures
from cortex_tvm.node_features import seeded_batch
from cortex_tvm.stage_numpy import StageNumpy
from cortex_tvm.target import make_target

from .numpy_twin import assert_forward_then_both_pullbacks, numpy_gradients, random_adjoints

H, F = 6, 5


@pytest.mark.parametrize("name", FEATURE_MODELS)
def test_the_compiled_pass_gives_the_numpy_gradients_of_weights_and_features(name, sst):
    trees, _ = sst
    model = ct.models.BY_NAME[name](hidden_size=H, inputs="features", embed_size=F)
    structs = structures(name, trees[:12])
    lin = model.linearize(structs, features=seeded_batch(structs, F, seed=4).features)
    states = model.numpy_forward(lin)
    d_states = random_adjoints(states, 5)
    want = numpy_gradients(model, lin, states, d_states)
    assert "features" in want
    compiled = Adjoint(model.program, model.linearize, make_target("llvm"))
    assert compiled.level_pass is not None, compiled.level_pass_note
    assert not compiled.distinct_leaves            # a leaf reads its own features, not a word
    assert_forward_then_both_pullbacks(compiled, lin, model.weights, states, d_states, want)


def test_each_node_adds_into_its_own_features_row():
    """TreeLSTM's leaf reads x[offset + n, f] in gates_sum = W @ x: the backward adds
    sum_{g,i} d gates_sum[n, g, i] * W[g*H + i, f] into d_features[offset + n, f] (the node's
    own slot: the nodes of a level run in parallel), and the function takes the features and
    their adjoint as (N, F) rows."""
    model = ct.models.TreeLSTM(hidden_size=16, inputs="features", embed_size=F)
    stages = {n: lower.build_stage(model.program, n) for n in ("leaf", "internal")}
    numpy_stages = {n: StageNumpy(s) for n, s in stages.items()}
    func, params = adjoint_kernel.level_pass(stages, numpy_stages, model.program, lanes=8, cores=2,
                                             part="backward")
    text = func.script()
    assert 'features: T.Buffer((v_2, 5), "float32"' in text and 'd_features: T.Buffer((v_2, 5), "float32"' in text
    assert [p[0] for p in params].count("d_features") == 1
    stores = [line.strip() for line in text.splitlines() if line.strip().startswith("d_features[")]
    assert stores and all("level_offsets[0] + (" in s.split("=")[0] for s in stores)
    # the sum over (g, i) in a register tile (8 nodes x the 5 features), then added into the rows
    assert ("buffer_4[v_12, v_13] = buffer_4[v_12, v_13] + d_leaf_leaf_gates_sum[v_6 + v_9 * 8 + v_12, v_10, v_11]"
            " * W_panels[v_13 // 16, v_10 * 16 + v_11, v_13 % 16]") in text      # (W's copy in panels: `Widened`)
    assert ("d_features[level_offsets[0] + (v_6 + v_9 * 8 + v_10), v_11] = d_features[level_offsets[0] + (v_6 + v_9 * 8"
            " + v_10), v_11] + buffer_4[v_10, v_11]") in text
