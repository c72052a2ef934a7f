"""Models written from scratch with ct.ra: a binary TreeRNN (one compute with two reductions, or
split), a custom schedule callable, and a ternary model that reads the number of children."""
import numpy as np
import pytest

import cortex_tvm as ct
from cortex_tvm import ra
from cortex_tvm.data import Node, postorder, random_trees

import reference as ref
from schedule.irutil import loads as loads_of

from .common import TOL, H, V


class TreeRNN(ct.models.Model):
    """Leaf h = emb[word]; internal h = tanh(Wl h_l + Wr h_r + b).

    `split=False`: one compute with two reductions; `split=True`: two
    reduction computes and an elementwise one.
    """

    def __init__(self, hidden_size, vocab_size, split=False, seed=0):
        self.hidden_size, self.vocab_size, self.split = hidden_size, vocab_size, split
        super().__init__(seed)

    def weight_shapes(self):
        H, V = self.hidden_size, self.vocab_size
        return {"emb": (V, H), "Wl": (H, H), "Wr": (H, H), "b": (H,)}

    def build_program(self):
        H, V = self.hidden_size, self.vocab_size
        tree, n = ra.Tree(max_children=2), ra.node()
        word = ra.node_input("word", bound=V)
        emb, Wl, Wr, b = (ra.weight("emb", (V, H)), ra.weight("Wl", (H, H)),
                          ra.weight("Wr", (H, H)), ra.weight("b", (H,)))
        h = ra.rec_placeholder("h", (H,))
        leaf_h = ra.compute((H,), lambda i: emb[word[n], i], name="leaf_h")
        kl, kr = ra.reduce_axis(H, "kl"), ra.reduce_axis(H, "kr")
        if self.split:
            left = ra.compute((H,), lambda i: ra.sum(Wl[i, kl] * h[ra.child(n, 0), kl], kl), name="left")
            right = ra.compute((H,), lambda i: ra.sum(Wr[i, kr] * h[ra.child(n, 1), kr], kr), name="right")
            internal_h = ra.compute((H,), lambda i: ra.tanh(left[i] + right[i] + b[i]), name="internal_h")
        else:
            internal_h = ra.compute(
                (H,), lambda i: ra.tanh(ra.sum(Wl[i, kl] * h[ra.child(n, 0), kl], kl)
                                        + ra.sum(Wr[i, kr] * h[ra.child(n, 1), kr], kr) + b[i]),
                name="internal_h")
        return ra.rec_compute(tree, {h: (leaf_h, internal_h)})


class TreeMean3(ct.models.Model):
    """A ternary model: leaf h = emb[word]; internal h = tanh(W mean(children h) + b).

    Reads the number of children (ra.num_children) and reduces over children and k at once.
    """

    def __init__(self, hidden_size, vocab_size, seed=0):
        self.hidden_size, self.vocab_size = hidden_size, vocab_size
        super().__init__(seed)

    def weight_shapes(self):
        H, V = self.hidden_size, self.vocab_size
        return {"emb": (V, H), "W": (H, H), "b": (H,)}

    def build_program(self):
        H, V = self.hidden_size, self.vocab_size
        tree, n = ra.Tree(max_children=3), ra.node()
        word = ra.node_input("word", bound=V)
        emb, W, b = ra.weight("emb", (V, H)), ra.weight("W", (H, H)), ra.weight("b", (H,))
        h = ra.rec_placeholder("h", (H,))
        leaf_h = ra.compute((H,), lambda i: emb[word[n], i], name="leaf_h")
        j, k = ra.reduce_axis(3, "j"), ra.reduce_axis(H, "k")
        internal_h = ra.compute(
            (H,), lambda i: ra.tanh(ra.sum(W[i, k] * h[ra.child(n, j), k], [j, k])
                                    / ra.num_children(n).astype("float32") + b[i]),
            name="internal_h")
        return ra.rec_compute(tree, {h: (leaf_h, internal_h)})


def mean3_reference(trees, w):
    w = {k: v.astype(np.float64) for k, v in w.items()}
    out = []
    for tree in trees:
        order = postorder(tree)
        index = {id(x): p for p, x in enumerate(order)}
        h = np.zeros((len(order), w["W"].shape[0]))
        for p, node in enumerate(order):
            if node.is_leaf:
                h[p] = w["emb"][node.word]
            else:
                mean = sum(h[index[id(ch)]] for ch in node.children) / len(node.children)
                h[p] = np.tanh(w["W"] @ mean + w["b"])
        out.append(h)
    return out


def rnn_trees():
    trees = random_trees(25, (1, 40), seed=11, vocab_size=V)
    trees.append(Node(children=[Node(children=[Node(word=1)]), Node(word=2)]))   # a unary node
    trees.append(ct.data.chain_tree(200, seed=3, vocab_size=V))
    return trees


@pytest.mark.parametrize("split", [False, True], ids=["two-sums", "two-computes"])
def test_tree_rnn_from_scratch(split):
    model = TreeRNN(H, V, split=split)
    lowered = model.lower(specialize_leaves=True)
    level_blocks = ct.RecSchedule(lowered).block_names("level")
    if split:
        assert level_blocks == ["left", "right", "internal_h"]
    else:   # each nested reduction becomes its own block
        assert level_blocks == ["internal_h_sum", "internal_h_sum1", "internal_h"]
    assert lowered.params == ['word', 'children', 'level_offsets', 'roots', 'max_level_size',
                              'emb', 'Wl', 'Wr', 'b', 'h', 'out']
    plain = model.lower(specialize_leaves=False)
    assert ct.RecSchedule(plain).block_names("level") == ["leaf_h"] + level_blocks + ["h_select"]
    assert plain.params == ['word', 'children', 'num_children', 'level_offsets', 'roots', 'max_level_size',
                            'emb', 'Wl', 'Wr', 'b', 'h', 'out']
    trees = rnn_trees()
    want = ref.tree_rnn(trees, model.weights)
    for schedule in ("none", None):
        compiled = model.compile(schedule=schedule)
        np.testing.assert_allclose(compiled(trees), np.stack([h[-1] for h in want]), atol=TOL, rtol=0)
        for got, w in zip(compiled(trees, all_nodes=True), want):
            np.testing.assert_allclose(got, w, atol=TOL, rtol=0)


def test_custom_schedule_callable():
    model = TreeRNN(H, V, split=True)
    calls = []

    def my_schedule(rs):
        assert isinstance(rs, ct.RecSchedule)
        assert not rs.lowered.specialized          # recipes start from the plain program
        rs.specialize_leaves()
        for name in rs.block_names("level"):
            loops = rs.get_loops(rs.get_sblock(name))
            _, inner = rs.split(loops[-1] if name == "internal_h" else loops[-2], [None, 8])
        calls.append(list(rs.trace))
        return rs

    compiled = model.compile(schedule=my_schedule)
    assert compiled.recipe_name == "my_schedule"
    assert len(calls) == 1
    assert [t.primitive for t in calls[0]] == ["specialize_leaves"] + ["s_tir.split"] * 3
    trees = rnn_trees()
    want = np.stack([h[-1] for h in ref.tree_rnn(trees, model.weights)])
    np.testing.assert_allclose(compiled(trees), want, atol=TOL, rtol=0)


def test_ternary_model_with_num_children():
    model = TreeMean3(H, V)
    lowered = model.lower(specialize_leaves=True)
    assert lowered.uses_num_children
    assert lowered.params[:3] == ["word", "children", "num_children"]
    func = lowered.func
    children = loads_of(func.body, "children")
    assert children and all(int(ld.source.shape[1]) == 3 for ld in children)
    leaves = [Node(word=w) for w in range(6)]
    trees = [
        Node(children=leaves[0:3]),
        Node(children=[Node(children=leaves[3:5]), Node(word=7)]),
        Node(children=[Node(children=[Node(word=8)]), Node(word=9),
                       Node(children=[Node(word=1), Node(word=2), Node(word=3)])]),
        Node(word=5),
    ] + random_trees(10, (1, 20), seed=2, vocab_size=V)
    compiled = model.compile()
    want = mean3_reference(trees, model.weights)
    np.testing.assert_allclose(compiled(trees), np.stack([h[-1] for h in want]), atol=TOL, rtol=0)
    for got, w in zip(compiled(trees, all_nodes=True), want):
        np.testing.assert_allclose(got, w, atol=TOL, rtol=0)
    with pytest.raises(ValueError, match="children"):
        compiled([Node(children=[Node(word=1) for _ in range(4)])])
