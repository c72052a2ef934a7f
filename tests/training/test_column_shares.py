"""The training forward's contractions with a large weight on shares of their columns
(`adjoint_runs.column_shares`, `adjoint_nest.splits_columns`): the IR, the threshold, and the
numpy backward's gradients for every zoo model with every such contraction split (the threshold
set to 0) over 3 cores, on the forward's kept values and with the recomputation."""
import pytest

import cortex_tvm as ct
from cortex_tvm import adjoint_kernel, adjoint_nest, lower
from cortex_tvm.adjoint import Adjoint
from cortex_tvm.adjoint_emit import StageEmitter
from cortex_tvm.bench.cases import OPTIONS, structures
from cortex_tvm.stage_numpy import StageNumpy
from cortex_tvm.target import make_target

from .ir_text import after_transposes
from .numpy_twin import assert_forward_then_both_pullbacks, numpy_gradients, random_adjoints

H = 6
#: three shares whatever this machine's cores (the code is built for the target's)
THREE_CORES = {"kind": "llvm", "num-cores": 3}


@pytest.fixture
def split_every_contraction(monkeypatch):
    monkeypatch.setattr(adjoint_nest, "SPLIT_WEIGHT_BYTES", 0)


@pytest.mark.parametrize("name", sorted(ct.models.BY_NAME))
def test_the_split_forward_gives_the_numpy_gradients(name, sst, split_every_contraction):
    trees, vocab = sst
    model = ct.models.BY_NAME[name](hidden_size=H, vocab_size=len(vocab), **OPTIONS.get(name, {}))
    lin = model.linearize(structures(name, trees[:12]))
    states = model.numpy_forward(lin)
    d_states = random_adjoints(states, 4)
    want = numpy_gradients(model, lin, states, d_states)
    compiled = Adjoint(model.program, model.linearize, make_target(THREE_CORES))
    assert compiled.level_pass is not None and compiled.level_pass.cores == 3
    compiled.distinct_leaves = False                   # the plain layout: `want`'s
    assert_forward_then_both_pullbacks(compiled, lin, model.weights, states, d_states, want)


def _forward_text(model, cores=3):
    stages = {n: lower.build_stage(model.program, n) for n in ("leaf", "internal")}
    numpy_stages = {n: StageNumpy(s) for n, s in stages.items()}
    func, _ = adjoint_kernel.level_pass(stages, numpy_stages, model.program, lanes=8, parallel=True, cores=cores,
                                        part="forward")
    return func.script(), stages, numpy_stages


def test_the_ir_splits_the_weights_columns_between_runs_of_nodes(split_every_contraction):
    """TreeFC, h = tanh(W @ (h_left + h_right) + b), 16 columns in 2 vectors of 8 lanes: each
    level's child sum in runs of nodes, then W's product on 3 shares of its chunks of columns
    over all the level's nodes (chunk numbers share * total // 3 .. (share + 1) * total // 3,
    the whole tiles' loop inside a chunk), then the tanh into the states in runs of nodes: three
    parallel loops a level where there was one."""
    text, _, _ = _forward_text(ct.models.TreeFC(hidden_size=16, vocab_size=20))
    leaves, levels = text.split("for v_5 in range(1, 1 + (v - 2)):")
    assert leaves.count("T.parallel(3)") == 1                 # the leaves read no weight
    assert levels.count("T.parallel(3)") == 3
    child_sum, product, states = levels.split("T.parallel(3)")[1:]
    assert "internal_child_sum[" in child_sum and "W_T" not in child_sum
    # tiles of 8 nodes: 2 chunks of one vector, this share's of them, the whole tiles inside
    assert "v_8: T.let[T.int32] = v_6 * 2 // 3" in product and "v_9: T.let[T.int32] = (v_6 + 1) * 2 // 3" in product
    assert "for v_10 in range(v_8, v_8 + (v_9 - v_8)):\n                for v_11 in range(v_7):" in product
    assert "T.alloc_local((8, 8))" in product
    assert "W_T[(v_10 % 2 * 8 + v_14) // 16, v_12, (v_10 % 2 * 8 + v_14) % 16]" in product     # (a panel: `Transposed`)
    for tile in (4, 2, 1):                                   # a rest tile: one chunk of 16 columns
        assert f"T.alloc_local(({tile}, 16))" in product
    assert "b[" in states and "W_T" not in states


def test_only_weights_of_split_weight_bytes_are_split():
    """TreeLSTM's U at h = 16 (10 KB) stays in runs of nodes (one parallel loop a level); at
    h = 112 (502 KB, over SPLIT_WEIGHT_BYTES) its product with the children's h is split (two:
    the product on shares of its columns, then the gates and states in runs of nodes), while
    the leaves' W (151 KB) is not."""
    small, _, _ = _forward_text(ct.models.TreeLSTM(hidden_size=16, vocab_size=20))
    assert small.split("for v_5 in range(1, 1 + (v - 2)):")[1].count("T.parallel(3)") == 1
    big = ct.models.TreeLSTM(hidden_size=112, vocab_size=20)
    text, stages, numpy_stages = _forward_text(big)
    assert text.split("for v_5 in range(1, 1 + (v - 2)):")[1].count("T.parallel(3)") == 2
    emitter = StageEmitter(stages["internal"], numpy_stages["internal"], 8, 3)
    split = [block.name for block in emitter.blocks
             if adjoint_nest.splits_columns(emitter, block, block.out_indices, block.body)]
    assert len(split) == 1 and "gates_sum" in split[0], split
    assert big.weights["U"].nbytes >= adjoint_nest.SPLIT_WEIGHT_BYTES > big.weights["W"].nbytes
    leaves = text.split("for v_5 in range(1, 1 + (v - 2)):")[0]
    assert leaves.count("T.parallel(3)") == 1


def test_a_row_read_through_the_word_does_not_count_as_the_weights_bytes():
    """TreeLSTM's leaves read emb[word[n], e]: each node one row, whatever the vocabulary.  With
    20,000 words the table is 1.3 MB, over SPLIT_WEIGHT_BYTES, and the leaves' W (3 KB at h = 16)
    under it: the leaves stay in runs of nodes."""
    model = ct.models.TreeLSTM(hidden_size=16, vocab_size=20000)
    assert model.weights["emb"].nbytes >= adjoint_nest.SPLIT_WEIGHT_BYTES
    text, stages, numpy_stages = _forward_text(model)
    leaves = after_transposes(text.split("for v_5 in range(1, 1 + (v - 2)):")[0])
    assert leaves.count("T.parallel(3)") == 1
    emitter = StageEmitter(stages["leaf"], numpy_stages["leaf"], 8, 3)
    assert not any(adjoint_nest.splits_columns(emitter, block, block.out_indices, block.body)
                   for block in emitter.blocks)
