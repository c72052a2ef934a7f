"""Structures from arrays (`ct.data.from_parents`, `ct.data.from_edges`): the same trees and DAGs
as the Node objects they were taken from (the compiled roots agree), and clear errors."""
import numpy as np
import pytest

import cortex_tvm as ct
from cortex_tvm.data import Node


def _to_parents(tree):
    """A Node tree as (parents, words) in post-order: the test's own conversion."""
    nodes = ct.data.postorder(tree)
    index = {id(n): i for i, n in enumerate(nodes)}
    parents = [-1] * len(nodes)
    for n in nodes:
        for c in n.children or []:
            parents[index[id(c)]] = index[id(n)]
    return parents, [-1 if n.word is None else n.word for n in nodes]


@pytest.fixture(scope="module")
def sst():
    return ct.data.sst_sample()


def test_parents_and_edges_rebuild_sst_trees(sst):
    trees, vocab = sst
    model = ct.models.TreeLSTM(hidden_size=16, vocab_size=len(vocab))
    compiled = model.compile()
    batch = trees[:20]
    rebuilt, from_dgl_style, from_pyg_style = [], [], []
    for t in batch:
        parents, words = _to_parents(t)
        (root,) = ct.data.from_parents(np.array(parents), words=np.array(words))
        rebuilt.append(root)
        child_to_parent = [(i, p) for i, p in enumerate(parents) if p >= 0]
        (root,) = ct.data.from_edges(child_to_parent, words, direction="child_to_parent")
        from_dgl_style.append(root)
        (root,) = ct.data.from_edges(np.array([(p, i) for i, p in child_to_parent]), words,
                                     direction="parent_to_child")
        from_pyg_style.append(root)
    want = compiled(batch)
    for got in (rebuilt, from_dgl_style, from_pyg_style):
        assert [len(ct.data.postorder(t)) for t in got] == [len(ct.data.postorder(t)) for t in batch]
        np.testing.assert_array_equal(compiled(got), want)


def test_a_forest_keeps_index_order_and_child_order():
    roots = ct.data.from_parents([2, 2, -1, -1], words=[4, 7, None, 9])
    assert [r.word for r in roots] == [None, 9]
    assert [c.word for c in roots[0].children] == [4, 7]      # increasing index: left, right
    (root,) = ct.data.from_edges([(2, 1), (2, 0)], [4, 7, -1], direction="parent_to_child")
    assert [c.word for c in root.children] == [7, 4]          # edge order


def test_a_shared_node_is_one_node_in_a_dag():
    (root,) = ct.data.from_edges([(0, 1), (0, 2), (1, 3), (2, 3)], [-1, 5, 6, 7], direction="parent_to_child")
    a, b = root.children
    assert a.children[0] is b.children[0] and a.children[0].word == 7
    model = ct.models.DAGRNN(hidden_size=8, vocab_size=10)
    manual = Node(children=[Node(word=5, children=[s := Node(word=7)]), Node(word=6, children=[s])])
    np.testing.assert_allclose(model.compile()([root]), model.compile()([manual]), atol=0)


@pytest.mark.parametrize("call, message", [
    (lambda: ct.data.from_parents([1, 0], [1, 2]), "cycle"),
    (lambda: ct.data.from_parents([1, 2, 0, -1], [1, 2, 3, 4]), "cycle"),
    (lambda: ct.data.from_parents([0], [1]), "parents\\[0\\] = 0: node 0 would be its own parent"),
    (lambda: ct.data.from_parents([5, -1], [1, 2]), "parents\\[0\\] = 5: node 5 is not one of the 2 nodes"),
    (lambda: ct.data.from_parents([1, -1], [None, 2]), "node 0 is a leaf without a word"),
    (lambda: ct.data.from_parents([1, -1], [1]), "words has 1 entries for 2 nodes"),
    (lambda: ct.data.from_parents([1.5, -1], [1, 2]), "must be an int"),
    (lambda: ct.data.from_edges([(0, 1)], [1, 2], direction="up"), "direction must be one of"),
    (lambda: ct.data.from_edges([(0, 3)], [1, 2], direction="parent_to_child"), "edge 0: node 3 is not one of the 2 nodes"),
    (lambda: ct.data.from_edges([(0, 1, 2)], [1, 2, 3], direction="parent_to_child"), "pair of int"),
    (lambda: ct.data.from_edges([(1, 1)], [1, 2], direction="parent_to_child"), "edge 0: node 1 would be its own parent"),
])
def test_bad_arrays_are_named(call, message):
    with pytest.raises((ValueError, TypeError), match=message):
        call()


def test_torch_edges_as_dgl_and_pyg_hold_them(sst):
    """DGL: zip(*g.edges()) gives pairs of 0-d tensors; PyG: edge_index (2, E), transposed."""
    torch = pytest.importorskip("torch")
    trees, vocab = sst
    tree = trees[3]
    parents, words = _to_parents(tree)
    child = torch.tensor([i for i, p in enumerate(parents) if p >= 0])
    parent = torch.tensor([p for p in parents if p >= 0])
    (dgl_style,) = ct.data.from_edges(zip(child, parent), words=torch.tensor(words), direction="child_to_parent")
    edge_index = torch.stack([parent, child])                   # PyG: row 0 source (the parent), row 1 target
    (pyg_style,) = ct.data.from_edges(edge_index.t(), words=words, direction="parent_to_child")
    compiled = ct.models.TreeFC(hidden_size=8, vocab_size=len(vocab)).compile()
    np.testing.assert_array_equal(compiled([dgl_style, pyg_style]), compiled([tree, tree]))
    with pytest.raises(ValueError, match="pair of int"):
        ct.data.from_edges(zip(child.float(), parent.float()), words, direction="child_to_parent")


class _TreeBatchGraph:
    """The three things `from_dgl` reads of a DGLGraph (`edges()`, `num_nodes()`, `ndata`), built the
    way DGL's SST dataset numbers a tree: pre-order ids, edges child -> parent, x = word or -1."""

    def __init__(self, trees, torch):
        src, dst, words = [], [], []
        for tree in trees:
            stack = [(tree, -1)]
            while stack:
                node, parent = stack.pop()
                nid = len(words)
                words.append(-1 if node.children else node.word)
                if parent >= 0:
                    src.append(nid), dst.append(parent)
                stack.extend((c, nid) for c in reversed(node.children or ()))
        self._edges = (torch.tensor(src), torch.tensor(dst))
        self.ndata = {"x": torch.tensor(words)}
        self.ndata["h"] = torch.randn(len(words), 6, generator=torch.Generator().manual_seed(0))

    def edges(self):
        return self._edges

    def num_nodes(self):
        return len(self.ndata["x"])


def test_from_dgl_feeds_a_compiled_model_in_dgl_node_order():
    torch = pytest.importorskip("torch")
    import cortex_tvm as ct
    from cortex_tvm.data import from_dgl, sst_sample
    trees = sst_sample()[0][:4]
    graph = _TreeBatchGraph(trees, torch)
    args = from_dgl(graph)
    assert sorted(args) == ["parents", "words"] and (args["parents"] == -1).sum() == 4
    compiled = ct.models.TreeLSTM(16, 20000).compile()
    np.testing.assert_allclose(compiled(**args), compiled(trees), atol=1e-6)
    # per-node features ride along in node order
    feats = from_dgl(graph, words=None, features="h")
    assert feats["features"].dtype == np.float32 and feats["features"].shape == (graph.num_nodes(), 6)
    assert "words" not in feats


def test_from_dgl_errors():
    torch = pytest.importorskip("torch")
    from cortex_tvm.data import from_dgl

    class Shared(_TreeBatchGraph):
        def edges(self):
            return torch.tensor([0, 0]), torch.tensor([1, 2])
    graph = Shared([], torch)
    graph.ndata = {"x": torch.tensor([3, -1, -1])}
    with pytest.raises(ValueError, match="node 0 has 2 parents"):
        from_dgl(graph)
    with pytest.raises(ValueError, match="no ndata\\['y'\\]"):
        from_dgl(_TreeBatchGraph([], torch), words="y")
    with pytest.raises(ValueError, match="direction must be one of"):
        from_dgl(graph, direction="up")
