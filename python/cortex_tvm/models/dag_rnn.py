"""DAG-RNN (Shuai et al. 2015 style): an RNN over a DAG such as an image grid."""
from __future__ import annotations

import numpy as np

from .. import ra
from .base import WordModel, check_sizes
from .structures import count_leaves_internal


class DAGRNN(WordModel):
    """h_n = tanh(Wx x_n + U sum_{p in preds(n)} h_p + b); returns the sink's h.

    Weights (float32, nn.Linear convention y = W x + b), E = embed size (H unless given):
    `emb (V, E)` input features, `Wx (H, E)`, `b (H,)`, `U (H, H)` (no bias).

    Structures are DAGs (`data.grid_dag`): a node is `Node(word=x,
    children=preds)` with x = emb[word] (0 for a node without a word) and at
    most `max_predecessors` predecessors; a node without predecessors is the
    leaf `Node(word=x)`, h = tanh(Wx x + b).  A node with several successors
    is computed once (`linearize(..., allow_shared=True)`); `all_nodes=True`
    lists the nodes in `data.dag_postorder` order.
    PyTorch names (`aliases`): emb.weight, Wx.weight, Wx.bias, U.weight.
    """

    aliases = {"emb.weight": "emb", "Wx.weight": "Wx", "Wx.bias": "b", "U.weight": "U"}
    reads_inner_words = True

    def __init__(self, hidden_size: int, vocab_size: int | None = None, max_predecessors: int = 2,
                 embed_size: int | None = None, seed: int = 0, inputs: str = "words"):
        check_sizes(max_predecessors=max_predecessors)
        self.max_predecessors = int(max_predecessors)
        super().__init__(hidden_size, vocab_size, embed_size, seed, inputs)

    def weight_shapes(self):
        H, E = self.hidden_size, self.embed_size
        return {**self.input_weights(), "Wx": (H, E), "b": (H,), "U": (H, H)}

    def build_program(self):
        H, E, P = self.hidden_size, self.embed_size, self.max_predecessors
        dag, n, child = ra.DAG(max_children=P), ra.node(), ra.child
        x, present = self.node_vector(optional=True)
        Wx, b, U = ra.weight("Wx", (H, E)), ra.weight("b", (H,)), ra.weight("U", (H, H))
        h = ra.rec_placeholder("h", (H,))

        e = ra.reduce_axis(E, "e")
        leaf_h = ra.compute((H,), lambda i: ra.tanh(ra.sum(Wx[i, e] * x(e), e) + b[i]), name="leaf_h")
        j = ra.reduce_axis(P, "j")
        pred_sum = ra.compute((H,), lambda k: ra.sum(h[child(n, j), k], j), name="pred_sum")
        inner_x = self.inner_vector(x, present)
        e2, k = ra.reduce_axis(E, "e2"), ra.reduce_axis(H, "k")
        internal_h = ra.compute((H,), lambda i: ra.tanh(ra.sum(Wx[i, e2] * inner_x[e2], e2)
                                                        + ra.sum(U[i, k] * pred_sum[k], k) + b[i]),
                                name="internal_h")
        return ra.rec_compute(dag, {h: (leaf_h, internal_h)})

    def numpy_forward(self, lin):
        w, H = self.weights, self.hidden_size
        h = np.zeros((lin.num_slots, H), np.float32)
        lo = lin.level_offsets
        h[lo[0]:lo[1]] = np.tanh(self.input_rows(lin, lo[0], lo[1]) @ w["Wx"].T + w["b"])
        for start, end in zip(lo[1:-1], lo[2:]):
            x = self.input_rows(lin, start, end)
            h[start:end] = np.tanh(x @ w["Wx"].T + h[lin.children[start:end]].sum(1) @ w["U"].T + w["b"])
        return [h]

    def flops(self, lin):
        H, E = self.hidden_size, self.embed_size
        leaves, internal = count_leaves_internal(lin)
        return 2.0 * H * E * leaves + 2.0 * (H * E + H * H) * internal
