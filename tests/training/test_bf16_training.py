"""compile(training=True, precision="bf16"): the level pass's products on bfloat16 inputs
(`adjoint_bf16`, AVX512_BF16's vdpbf16ps).

* the IR (built on any machine, not run): the forward's products with U and W, the backward's
  d_h and d_emb (dG . U, dG . W) and the sums dU, dW take `cortex_dpbf16ps` on pair copies and
  pair panels; the weights' copies are uint32 pairs; a bias's sum stays float32; built for Zen 4,
  each vdpbf16ps reads its node's pair as an embedded broadcast;
* the numbers: TreeLSTM's gradients on SST trees equal float64 PyTorch autograd through an eager
  recursion whose every weight product rounds its inputs and its incoming gradient to bfloat16
  (`eager.Bf16Product`), far closer than to the float32 gradients; other zoo models' within
  bfloat16's error of their float32 gradients, and not equal to them;
* `as_torch()` trains: Adagrad steps' losses track the float32 module's.
The refusal on a CPU target without AVX512_BF16 is in test_torch_training.py.
"""
import re

import numpy as np
import pytest
import tvm

import cortex_tvm as ct
from cortex_tvm import adjoint_kernel, adjoint_packed, dot_bf16, lower, tir_pipeline
from cortex_tvm.stage_numpy import StageNumpy
from cortex_tvm.target import host_features

torch = pytest.importorskip("torch")

from .cells import tree_fc  # noqa: E402
from .eager import EagerTreeLSTM, eager_grads, pullbacks, weight_difference as _difference  # noqa: E402 - needs torch

H = 16        # (one vector of 16 lanes: the pairs' nests need AVX-512's)

needs_bf16_cpu = pytest.mark.skipif(
    dot_bf16.FEATURE not in host_features(),
    reason="runs vdpbf16ps: this CPU has no AVX512_BF16 (Intel Cooper Lake / Sapphire Rapids or AMD Zen 4 "
           "and later); the IR test still ran")


def test_the_packed_sums_take_pairs_only_in_vdpbf16ps_vectors():
    """`adjoint_packed.emit_packed` on pairs with AVX2's 8 lanes: refused before it emits anything."""
    with pytest.raises(ValueError, match="pairs take vectors of 16 float32 lanes"):
        adjoint_packed.emit_packed(None, None, None, None, None, [], [], None, 1, lanes=8, width=8, shares=1,
                                   pairs=True)


def _calls_by_operand(text) -> dict:
    """{the buffer whose words a vdpbf16ps call reads as its pair vector: how many calls}."""
    found = re.findall(r'"cortex_dpbf16ps".*?T.reinterpret\("int32x16", (\w+)\[', text)
    return {name: found.count(name) for name in set(found)}


def _tree_lstm_pass(part, bf16):
    """(PrimFunc, parameters) of the level pass's `part` for TreeLSTM h = H, 2 cores, 16 lanes."""
    model = ct.models.TreeLSTM(H, 50)
    stages = {n: lower.build_stage(model.program, n) for n in ("leaf", "internal")}
    return adjoint_kernel.level_pass(stages, {n: StageNumpy(s) for n, s in stages.items()}, model.program,
                                     lanes=16, cores=2, part=part, bf16=bf16)


def test_the_bf16_level_pass_ir():
    """TreeLSTM h = 16 (U 80 x 32, W 48 x 16): every product of a weight and node values is a
    vdpbf16ps over pairs, in each register tile (whole tiles of 8 nodes, rest tiles of 1, 2, 4)."""
    texts = {}
    for part in ("forward", "backward"):
        for bf16 in (False, True):
            func, params = _tree_lstm_pass(part, bf16)
            texts[part, bf16] = func.script()
            copies = sorted((p[0], p[1].name) + p[2:] for p in params if p[0] in ("transposed", "widened"))
            # the copies in 16-lane panels: the transposes (W_T, U_T) the forward reads, the widened
            # copies (W_panels, U_panels) the backward reads; with bf16, words of pairs along the sum
            dtype = "uint32" if bf16 else "float32"
            assert copies == [("transposed", "U", (5, 16 if bf16 else 32, 16), dtype),
                              ("transposed", "W", (3, 8 if bf16 else 16, 16), dtype),
                              ("widened", "U", (2, 40 if bf16 else 80, 16), dtype),
                              ("widened", "W", (1, 24 if bf16 else 48, 16), dtype)]
    assert all("cortex_dpbf16ps" not in texts[part, False] for part in ("forward", "backward"))
    forward, backward = texts["forward", True], texts["backward", True]
    # the forward's gates: U_T's and W_T's words against each node's pairs, in each of 4 tiles
    assert _calls_by_operand(forward) == {"U_T": 4, "W_T": 4}
    assert "pragma_import_llvm" in forward
    # the weights' pair copies: a word from a source row's two neighbours (W_T[.., k // 2, ..]), a
    # pair of rows (U_panels[.., r // 2, ..])
    assert 'W_T[v_5 // 16 + v_5 % 16 // 16, v_6, v_5 % 16 % 16] = T.reinterpret("uint32", W[v_5, v_6 * 2])' in forward
    # the backward's d_h = dG . U and d_emb = dG . W on the widened pair copies the forward wrote, each node's
    # dG rounded once a run, each value's bfloat16 bits stored along the sum in whole vectors
    # (uint16, d_internal_gates_sum[.., g, i] at i) and read as pairs through a uint32 view
    assert _calls_by_operand(backward) == {"U_panels": 4, "W_panels": 4, "buffer_4": 2}
    assert re.search(r'buffer_4\[v_10, v_11, v_12 \* 16 \+ v_13\] = T.Cast\("uint16", T.reinterpret\("uint32", '
                     r'd_internal_gates_sum\[.*, v_11, v_12 \* 16 \+ v_13\]\)', backward)
    assert re.search(r'T.Broadcast\(T.reinterpret\("int32", buffer_5\[.*\]\), 16\), '
                     r'T.reinterpret\("int32x16", U_panels', backward)
    views = 'buffer_5 = buffer_4.view("uint32")'
    assert backward.count(views) == 2 == forward.count(views)
    # the sums dU and dW (the 2 calls on buffer_4): panels of pairs along the nodes, 64 nodes a
    # block (32 words a column, 16 columns a chunk: U's 2 chunks, W's 1); the biases' sums float32
    assert 'buffer_4 = T.alloc_buffer((1024,), "uint32")' in backward
    assert 'buffer_4 = T.alloc_buffer((512,), "uint32")' in backward
    assert backward.count('T.alloc_local((256,), "uint32")') == 2


@pytest.mark.parametrize("part", ["forward", "backward"])
def test_each_nodes_pair_is_read_as_the_instructions_broadcast(part):
    """Built for Zen 4 (on any machine, not run), every vdpbf16ps of the h = 16 pass reads the node's
    pair from memory as its broadcast operand (`m32{1to16}`), with no vbroadcastss of its own: the
    wrapper passes the pair as the intrinsic's last operand, the one an EVEX instruction can
    broadcast (in the other order none is folded; a tile with a vbroadcastss per vdpbf16ps ran at
    about 71% of the instruction's throughput there: docs/bench-2026-12-07/bf16-tiles/)."""
    func, _ = _tree_lstm_pass(part, True)
    executable = tvm.compile(tvm.IRModule({"level_pass": func}), target=tvm.target.Target(
        {"kind": "llvm", "mcpu": "znver4"}), tir_pipeline=tir_pipeline.NAME)
    dots = [line for line in executable.mod.inspect_source("asm").splitlines() if "vdpbf16ps" in line]
    assert len(dots) > 100
    assert all("{1to16}" in line for line in dots), [line for line in dots if "{1to16}" not in line][:3]


@pytest.fixture(scope="module")
def treelstm(sst):
    trees, vocab = sst
    model = ct.models.TreeLSTM(H, len(vocab), seed=5)
    return trees[:20], model, model.compile(training=True, precision="bf16"), model.compile(training=True)


@needs_bf16_cpu
@pytest.mark.parametrize("all_nodes", [False, True])
def test_gradients_equal_autograd_of_products_on_bf16_inputs(treelstm, all_nodes):
    trees, model, bf16, fp32 = treelstm
    (got, fp32_got), loss_of = pullbacks([bf16, fp32], trees, H, all_nodes)
    emulated = eager_grads(model.weights, loss_of, bf16=True)
    exact = eager_grads(model.weights, loss_of, bf16=False)
    # bf16 products: 2-3e-3 from the exact gradients; the emulation agrees 50 times closer
    # (float32 sums in another order, and a value near a rounding boundary rounding the other way)
    assert _difference(got, emulated) < 2e-4
    assert _difference(fp32_got, exact) < 2e-5
    assert _difference(got, exact) > 10 * _difference(got, emulated)
    assert _difference(got, exact) < 3e-2


@needs_bf16_cpu
def test_the_forward_rounds_as_the_emulation(treelstm):
    trees, model, bf16, _ = treelstm
    out, _ = bf16.vjp(trees)
    roots = EagerTreeLSTM(model.weights, bf16=True)(trees)[0].detach().numpy()
    exact = EagerTreeLSTM(model.weights)(trees)[0].detach().numpy()
    assert np.abs(out - roots).max() < 1e-5 < np.abs(out - exact).max()


@needs_bf16_cpu
@pytest.mark.parametrize("name", ["treegru", "childsum", "mvrnn", "seqlstm", "dagrnn"])
def test_other_models_train_in_bf16(name, sst):
    """Each model's products that have the form take pairs, the others stay float32 (MV-RNN's
    node matrices): the gradients within bfloat16's error of float32's, and not equal to them.
    DAG-RNN's grid DAGs (nodes with two parents) run the serial twin of the pass."""
    trees, vocab = sst
    from cortex_tvm.bench.cases import OPTIONS, structures
    model = ct.models.BY_NAME[name](hidden_size=H, vocab_size=len(vocab), seed=2, **OPTIONS.get(name, {}))
    batch = structures(name, trees[:6])
    got = {}
    for precision in ("bf16", "fp32"):
        compiled = model.compile(training=True, precision=precision)
        out, vjp = compiled.vjp(batch)
        got[precision] = vjp(np.random.default_rng(4).standard_normal(np.shape(out)).astype(np.float32))
        assert compiled.adjoint.level_pass.last_run == ("backward", "serial" if name == "dagrnn" else "parallel")
    difference = _difference(got["bf16"], got["fp32"])
    assert 1e-5 < difference < 3e-2, difference


@needs_bf16_cpu
def test_as_torch_steps_track_the_float32_module(treelstm):
    trees, model, bf16, fp32 = treelstm
    direction = torch.from_numpy(np.random.default_rng(6).standard_normal((10, H)).astype(np.float32))
    losses = {}
    for name, compiled in (("bf16", bf16), ("fp32", fp32)):
        compiled.load_weights(model.weights)
        module = compiled.as_torch()
        optimizer = torch.optim.Adagrad(module.parameters(), lr=0.05)
        losses[name] = []
        for step in range(5):
            optimizer.zero_grad()
            loss = (module(trees[10 * (step % 2): 10 * (step % 2) + 10]) * direction).sum()
            loss.backward()
            optimizer.step()
            losses[name].append(float(loss))
    np.testing.assert_allclose(losses["bf16"], losses["fp32"], rtol=2e-2, atol=1e-2)
    assert losses["bf16"] != losses["fp32"]


@needs_bf16_cpu
def test_a_traced_cell_trains_in_bf16_as_the_zoo_model():
    zoo = ct.models.TreeFC(H, 30, seed=4)
    trees = ct.data.random_trees(5, (2, 12), seed=3, vocab_size=30)
    direction = np.random.default_rng(7).standard_normal((5, H)).astype(np.float32)
    cell = ct.compile(tree_fc, weights=zoo.weights, max_children=2, training=True, precision="bf16")
    got = cell.vjp(trees)[1](direction)
    want = zoo.compile(training=True, precision="bf16").vjp(trees)[1](direction)
    fp32 = zoo.compile(training=True).vjp(trees)[1](direction)
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-6, err_msg=name)
    assert 1e-5 < _difference(got, fp32) < 3e-2
