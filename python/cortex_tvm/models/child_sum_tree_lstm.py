"""Child-sum TreeLSTM (Tai et al. 2015), n-ary, one forget gate per child."""
from __future__ import annotations

import numpy as np

from .. import ra
from .base import Model, check_sizes, sigmoid
from .structures import count_leaves_internal


class ChildSumTreeLSTM(Model):
    """Child-sum TreeLSTM on trees of up to `max_children` children; returns the root h.

    Weights (float32, nn.Linear convention y = W x + b), E = embed size (H unless given),
    laid out like the usual PyTorch module (ioux, iouh, fx, fh Linear layers):
    `emb (V, E)`; `W_iou (3H, E)`, `b_iou (3H,)`; `U_iou (3H, H)`, `bU_iou (3H,)`
    (rows [i; o; u]); `W_f (H, E)`, `b_f (H,)`; `U_f (H, H)`, `bU_f (H,)`.

    A node's input x is emb[word] at a leaf and 0 at an internal node (a
    `data.Node` holds a word XOR children), so `W_f` never acts (it is kept
    for state_dict compatibility), and the biases always do.  With
    h~ = sum_k h_k over the children (0 at a leaf), s = sigmoid:
      i, o, u = s/s/tanh(W_iou x + b_iou + U_iou h~ + bU_iou)
      f_k = s(W_f x + b_f + U_f h_k + bU_f)           (per child k)
      c = i * u + sum_k f_k * c_k;  h = o * tanh(c)
    A missing child slot reads the null node (h = c = 0), so sums over all
    `max_children` slots are sums over the real children.
    PyTorch names (`aliases`): emb.weight, ioux/iouh/fx/fh .weight/.bias.
    """

    aliases = {"emb.weight": "emb", "ioux.weight": "W_iou", "ioux.bias": "b_iou",
               "iouh.weight": "U_iou", "iouh.bias": "bU_iou", "fx.weight": "W_f", "fx.bias": "b_f",
               "fh.weight": "U_f", "fh.bias": "bU_f"}

    def __init__(self, hidden_size: int, vocab_size: int, max_children: int = 4,
                 embed_size: int | None = None, seed: int = 0):
        embed_size = hidden_size if embed_size is None else embed_size
        check_sizes(hidden_size=hidden_size, vocab_size=vocab_size, embed_size=embed_size,
                     max_children=max_children)
        self.hidden_size, self.vocab_size, self.embed_size = hidden_size, vocab_size, embed_size
        self._max_children = int(max_children)
        super().__init__(seed)

    @property
    def max_children(self) -> int:
        return self._max_children

    def weight_shapes(self):
        H, V, E = self.hidden_size, self.vocab_size, self.embed_size
        return {"emb": (V, E), "W_iou": (3 * H, E), "b_iou": (3 * H,), "U_iou": (3 * H, H),
                "bU_iou": (3 * H,), "W_f": (H, E), "b_f": (H,), "U_f": (H, H), "bU_f": (H,)}

    def build_program(self):
        H, V, E, K = self.hidden_size, self.vocab_size, self.embed_size, self._max_children
        tree, n, s, tanh, child = ra.Tree(max_children=K), ra.node(), ra.sigmoid, ra.tanh, ra.child
        word = ra.node_input("word", bound=V)
        emb = ra.weight("emb", (V, E))
        W_iou, b_iou = ra.weight("W_iou", (3 * H, E)), ra.weight("b_iou", (3 * H,))
        U_iou, bU_iou = ra.weight("U_iou", (3 * H, H)), ra.weight("bU_iou", (3 * H,))
        b_f, U_f, bU_f = ra.weight("b_f", (H,)), ra.weight("U_f", (H, H)), ra.weight("bU_f", (H,))
        h, c = ra.rec_placeholder("h", (H,)), ra.rec_placeholder("c", (H,))

        e = ra.reduce_axis(E, "e")
        iou = ra.compute((3 * H,), lambda r: ra.sum(W_iou[r, e] * emb[word[n], e], e) + b_iou[r] + bU_iou[r],
                         name="leaf_gates")
        leaf_c = ra.compute((H,), lambda i: s(iou[i]) * tanh(iou[2 * H + i]), name="leaf_c")
        leaf_h = ra.compute((H,), lambda i: s(iou[H + i]) * tanh(leaf_c[i]), name="leaf_h")

        j = ra.reduce_axis(K, "j")
        h_sum = ra.compute((H,), lambda k: ra.sum(h[child(n, j), k], j), name="h_sum")
        k = ra.reduce_axis(H, "k")
        gates = ra.compute((3 * H,), lambda r: ra.sum(U_iou[r, k] * h_sum[k], k) + b_iou[r] + bU_iou[r],
                           name="gates")
        k2 = ra.reduce_axis(H, "k2")
        forget = ra.compute((K, H), lambda q, i: s(ra.sum(U_f[i, k2] * h[child(n, q), k2], k2) + bU_f[i] + b_f[i]),
                            name="forget")
        j2 = ra.reduce_axis(K, "j2")
        internal_c = ra.compute((H,), lambda i: s(gates[i]) * tanh(gates[2 * H + i])
                                + ra.sum(forget[j2, i] * c[child(n, j2), i], j2), name="internal_c")
        internal_h = ra.compute((H,), lambda i: s(gates[H + i]) * tanh(internal_c[i]), name="internal_h")
        return ra.rec_compute(tree, {h: (leaf_h, internal_h), c: (leaf_c, internal_c)})

    def numpy_forward(self, lin):
        w, H = self.weights, self.hidden_size
        h = np.zeros((lin.num_slots, H), np.float32)
        c = np.zeros((lin.num_slots, H), np.float32)
        lo = lin.level_offsets
        bias = w["b_iou"] + w["bU_iou"]
        g = w["emb"][lin.words[lo[0]:lo[1]]] @ w["W_iou"].T + bias
        c[lo[0]:lo[1]] = sigmoid(g[:, :H]) * np.tanh(g[:, 2 * H:])
        h[lo[0]:lo[1]] = sigmoid(g[:, H:2 * H]) * np.tanh(c[lo[0]:lo[1]])
        for start, end in zip(lo[1:-1], lo[2:]):
            kids = lin.children[start:end]                     # (m, K), null slot 0 where absent
            hk, ck = h[kids], c[kids]                          # (m, K, H)
            g = hk.sum(1) @ w["U_iou"].T + bias
            f = sigmoid(hk @ w["U_f"].T + w["bU_f"] + w["b_f"])
            c[start:end] = sigmoid(g[:, :H]) * np.tanh(g[:, 2 * H:]) + (f * ck).sum(1)
            h[start:end] = sigmoid(g[:, H:2 * H]) * np.tanh(c[start:end])
        return [h, c]

    def flops(self, lin):
        H, E, K = self.hidden_size, self.embed_size, self._max_children
        leaves, internal = count_leaves_internal(lin)
        return 2.0 * 3 * H * E * leaves + 2.0 * (3 * H * H + K * H * H) * internal
