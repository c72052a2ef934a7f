"""Node features in programs that are not zoo models: a hand-written ct.ra program, the molecule
example, and a traced `@ct.recursive` cell that reads `node.features`."""
import numpy as np
import pytest

import cortex_tvm as ct
from cortex_tvm import ra

from node_features_util import TREES, close, rows_for


def test_hand_written_program_with_node_features():
    n, Hs, Fs = ra.node(), 16, 12
    x = ra.node_features("x", Fs)
    Wx, U = ra.weight("Wx", (Hs, Fs)), ra.weight("U", (Hs, Hs))
    h = ra.rec_placeholder("h", (Hs,))
    f, k = ra.reduce_axis(Fs, "f"), ra.reduce_axis(Hs, "k")
    leaf = ra.compute((Hs,), lambda i: ra.tanh(ra.sum(Wx[i, f] * x[n, f], f)), name="leaf_h")
    kids = ra.compute((Hs,), lambda i: h[ra.child(n, 0), i] + h[ra.child(n, 1), i], name="kids")
    f2 = ra.reduce_axis(Fs, "f2")
    inner = ra.compute((Hs,), lambda i: ra.tanh(ra.sum(U[i, k] * kids[k], k) + ra.sum(Wx[i, f2] * x[n, f2], f2)),
                       name="inner_h")
    program = ra.rec_compute(ra.Tree(2), {h: (leaf, inner)})
    rng = np.random.default_rng(1)
    weights = {"Wx": rng.standard_normal((Hs, Fs)).astype(np.float32) * 0.3,
               "U": rng.standard_normal((Hs, Hs)).astype(np.float32) * 0.3}
    compiled = ct.compile(program, weights=weights)
    X = rows_for(TREES[:3], Fs, seed=5)
    out = compiled(TREES[:3], features=X)

    rows = iter(X.astype(np.float64))
    def node_h(t):
        kids = [node_h(c) for c in t.children or ()]
        row = next(rows)                       # post-order: a node's row after its children's
        if not kids:
            return np.tanh(weights["Wx"] @ row)
        return np.tanh(weights["U"] @ (kids[0] + kids[1]) + weights["Wx"] @ row)
    close(out, np.stack([node_h(t) for t in TREES[:3]]))


def test_molecule_example_matches_its_float64_reference():
    """examples/dag_rnn_molecules.py: atom features on DAGs (rings share an atom) vs float64 numpy."""
    import importlib.util
    import pathlib
    path = pathlib.Path(__file__).resolve().parents[1] / "examples" / "dag_rnn_molecules.py"
    spec = importlib.util.spec_from_file_location("dag_rnn_molecules", path)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    result = example.main(["--molecules", "8", "--hidden", "16", "--batch", "4"])
    assert result["max_abs_err"] <= example.TOLERANCE and result["shared"] == 8


@ct.recursive
def featured_rnn(node, p):
    x = p.Wx @ node.features + p.b
    if node.is_leaf:
        return ct.tanh(x)
    return ct.tanh(p.U @ (featured_rnn(node.children[0], p) + featured_rnn(node.children[1], p)) + x)


def test_traced_cell_reads_node_features():
    Hs, Fs = 16, 24
    rng = np.random.default_rng(4)
    weights = {"Wx": (rng.standard_normal((Hs, Fs)) * 0.2).astype(np.float32),
               "b": rng.standard_normal(Hs).astype(np.float32),
               "U": (rng.standard_normal((Hs, Hs)) * 0.2).astype(np.float32)}
    trees = TREES[:4]
    X = rows_for(trees, Fs, seed=6)
    compiled = ct.compile(featured_rnn, weights=weights, features=Fs)
    assert compiled.signature.node_features == (("features", Fs, "float32"),)
    w = {k: v.astype(np.float64) for k, v in weights.items()}
    rows = iter(X.astype(np.float64))

    def node_h(t):                                  # post-order: children's rows come first
        kids = [node_h(c) for c in t.children or ()]
        x = w["Wx"] @ next(rows) + w["b"]
        return np.tanh(x) if not kids else np.tanh(w["U"] @ (kids[0] + kids[1]) + x)
    ref = np.stack([node_h(t) for t in trees])
    close(compiled(trees, features=X), ref)
    model = ct.frontend.TracedModel(featured_rnn, weights, 2, features=Fs)
    close(model.reference(trees, features=X), ref)
    assert "features[n, e]" in ct.frontend.ra_text(model.program)
    with pytest.raises(ValueError, match=r"give their width: ct.compile\(cell, weights=..., features=F\)"):
        ct.compile(featured_rnn, weights=weights)
    with pytest.raises(ValueError, match="never reads node.features"):
        ct.compile(TREE_FC_CELL, weights={"emb": np.ones((5, 4), np.float32), "W": np.eye(4, dtype=np.float32),
                                           "b": np.zeros(4, np.float32)}, features=4)


@ct.recursive
def TREE_FC_CELL(node, p):
    if node.is_leaf:
        return p.emb[node.word]
    return ct.tanh(p.W @ (TREE_FC_CELL(node.children[0], p) + TREE_FC_CELL(node.children[1], p)) + p.b)
