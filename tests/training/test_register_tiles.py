"""The compiled backward's register tiles (`adjoint_nest.tile_vectors`, `tile_sums`), the lanes of
a chunk of columns (`tir_builder.lane_loops`) and the packed weight sums
(`adjoint_packed.emit_packed`): the IR they emit, and the numpy backward's gradients whatever
the CPU, with a tile's vectors forced to 1 (one FMA unit, or AVX2) and to 2 (AVX-512 with two).
"""
import re

import numpy as np
import pytest
from tvm.script.ir_builder import IRBuilder
from tvm.script.ir_builder import tirx as Tb

import cortex_tvm as ct
from cortex_tvm import adjoint_kernel, adjoint_pass, lower
from cortex_tvm.adjoint_nest import tile_sums, tile_vectors
from cortex_tvm.stage_numpy import StageNumpy
from cortex_tvm.target import CpuInfo
from cortex_tvm.tir_builder import lane_loops

from .numpy_twin import assert_same_gradients, numpy_gradients, zoo_case


def _lanes_ir(width, vector, lanes):
    """The script of a function storing lane + 1 at each of `width` columns via `lane_loops`."""
    with IRBuilder() as ib:
        with Tb.prim_func():
            Tb.func_name("lanes")
            out = Tb.arg("out", Tb.buffer((width,), "float32"))
            lane_loops(width, vector, lambda lane: Tb.buffer_store(out, (lane + 1).astype("float32"), [lane]),
                       lanes)
    return ib.get().script()


def test_a_chunk_is_its_whole_vectors_then_one_short_vector():
    """22 columns of 16 lanes: a vectorized loop of 16, then one of 6 from column 16 (not one
    loop of 22, a vector LLVM builds element by element); 48: three loops of 16; 17: 16, then
    the last column alone; not vectorized: one serial loop."""
    text = _lanes_ir(22, True, 16)
    assert "for v in T.vectorized(16):\n        out[v] = T.Cast(\"float32\", v + 1)" in text
    assert "for v in T.vectorized(6):\n        out[16 + v] = T.Cast(\"float32\", 16 + v + 1)" in text
    text = _lanes_ir(48, True, 16)
    assert re.findall(r"T\.vectorized\((\d+)\)", text) == ["16"] * 3 and "out[32 + v]" in text
    text = _lanes_ir(17, True, 16)
    assert re.findall(r"T\.vectorized\((\d+)\)", text) == ["16"] and "out[16] = T.float32(17.0)" in text
    text = _lanes_ir(22, False, 16)
    assert "for v in range(22):" in text and "T.vectorized" not in text


def test_tile_vectors_and_sums():
    """Two vectors a whole tile where the CPU has two FMA units and 32 vector registers; one on
    AVX2 (16 registers) and on a CPU with one FMA unit.  A whole tile of 8 nodes keeps 8 x
    vectors sums, a rest tile 8."""
    def info(registers, fma_units):
        return CpuInfo(16 if registers == 32 else 8, registers, 2, "avx512" if registers == 32 else "avx2", "",
                       fma_units)
    assert [tile_vectors(info(32, 2)), tile_vectors(info(32, 1)), tile_vectors(info(16, 2))] == [2, 1, 1]
    assert [tile_sums(size, 2) for size in (8, 4, 2, 1)] == [16, 8, 8, 8]
    assert [tile_sums(size, 1) for size in (8, 4, 2, 1)] == [8, 8, 8, 8]


def _level_pass_text(name, hidden, lanes, vectors):
    model = ct.models.BY_NAME[name](hidden_size=hidden, vocab_size=20)
    stages = {n: lower.build_stage(model.program, n) for n in ("leaf", "internal")}
    numpy_stages = {n: StageNumpy(s) for n, s in stages.items()}
    func, _ = adjoint_kernel.level_pass(stages, numpy_stages, model.program, lanes=lanes, parallel=True, cores=2,
                                        vectors=vectors)
    return func.script()


def test_treelstm_tiles_of_two_vectors_ir():
    """TreeLSTM h = 54, 16 lanes, 2 vectors: whole tiles of 8 nodes x 32 columns, the 22 columns
    past them 8 x (16 + 6) in one tile; rest tiles of 4, 2 and 1 nodes, 8 sums each (4 x 32, and
    2 and 1 node x 48 columns: no more vectors than the 54 columns' 3 whole ones); dU and dW
    (leaf) as packed products: a column panel of 32 nodes per core, a row panel of 32 x 8."""
    text = _level_pass_text("treelstm", 54, 16, 2)
    for shape in ("(8, 32)", "(8, 22)", "(4, 32)", "(2, 48)", "(1, 48)"):
        assert f"T.alloc_local({shape})" in text, shape
    assert "T.alloc_local((8, 16))" not in text                # no whole tile of one vector
    assert "T.alloc_buffer((3456,))" in text                   # U's column panel: 2 children x 32 x 54
    assert "T.alloc_buffer((1728,))" in text                   # the leaf W's: the word's 32 x 54 (x = h)
    assert text.count("T.alloc_local((256,))") == 2            # each one's row panel, 32 x 8
    assert "T.Select(v_8 == 0, T.float32(0.0), grad_internal_gates_sum_0[" in text   # the first block starts


@pytest.mark.parametrize("lanes,vectors", [(16, 2), (16, 1), (8, 1)])
@pytest.mark.parametrize("name", sorted(ct.models.BY_NAME))
def test_every_vector_at_most_one_register(name, lanes, vectors):
    """Every vectorized loop of every zoo model's level pass at h = 54 is one vector at most:
    LLVM builds longer ones of an odd length element by element through the stack (`lane_loops`)."""
    widths = {int(w) for w in re.findall(r"T\.vectorized\((\d+)\)", _level_pass_text(name, 54, lanes, vectors))}
    assert widths and max(widths) <= lanes, sorted(widths)


@pytest.mark.parametrize("vectors", [1, 2])
@pytest.mark.parametrize("name,hidden", [("treelstm", 54), ("treefc", 22), ("dagrnn", 22)])
def test_tiles_of_one_and_two_vectors_give_the_numpy_gradients(name, hidden, vectors, sst, monkeypatch):
    """The compiled pass with a tile's vectors forced, against the numpy backward on 40 SST trees
    (levels of every size mod 8: whole tiles and each rest tile; DAG-RNN's grids: the serial
    function), h past the whole vectors and chunks of either ISA."""
    monkeypatch.setattr(adjoint_pass, "tile_vectors", lambda info: vectors)
    model, lin, states, d_states, compiled = zoo_case(name, hidden, sst, 40, 2)
    assert compiled.level_pass._vectors == vectors
    got = compiled.vjp(lin, states, model.weights, [d.copy() for d in d_states])
    assert_same_gradients(got, numpy_gradients(model, lin, states, d_states))
    assert np.isfinite(np.concatenate([g.ravel() for g in got.values()])).all()
