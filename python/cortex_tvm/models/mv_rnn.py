"""MV-RNN (Socher et al. 2012): every node has a vector and a matrix."""
from __future__ import annotations

import numpy as np

from .. import ra
from .base import WordModel
from .structures import count_leaves_internal


class MVRNN(WordModel):
    """Matrix-vector RNN on binary trees; returns the root vector a (states: a (H,), A (H, H)).

    Weights (float32, nn.Linear convention y = W x + b):
    `emb (V, H)` word vectors, `embM (V, H, H)` word matrices, `W (H, 2H)`, `b (H,)`,
    `WM (H, 2H)` (no bias).

    Leaf: a = emb[word]; A = embM[word].
    Internal, children (a, A) left and (b, B) right:
      a_n = tanh(W [B a; A b] + b)      (B a: the right matrix times the left vector)
      A_n = WM [A; B]                   ((H, 2H) @ (2H, H))
    New models hold word matrices I + N(0, 0.1^2) (Socher's identity-plus-noise init).
    PyTorch names (`aliases`): emb.weight, embM, W.weight, W.bias, WM.weight.
    """

    aliases = {"emb.weight": "emb", "embM.weight": "embM", "W.weight": "W", "W.bias": "b",
               "WM.weight": "WM"}

    def __init__(self, hidden_size: int, vocab_size: int, seed: int = 0):
        super().__init__(hidden_size, vocab_size, seed=seed)      # the embedding size is H

    def weight_shapes(self):
        H, V = self.hidden_size, self.vocab_size
        return {"emb": (V, H), "embM": (V, H, H), "W": (H, 2 * H), "b": (H,), "WM": (H, 2 * H)}

    def init_weights(self, seed):
        out = super().init_weights(seed)
        H, V = self.hidden_size, self.vocab_size
        noise = np.random.default_rng(seed + 1).standard_normal((V, H, H)) * 0.1
        out["embM"] = (np.eye(H)[None] + noise).astype(np.float32)
        return out

    def build_program(self):
        H, V = self.hidden_size, self.vocab_size
        tree, n, child = ra.Tree(max_children=2), ra.node(), ra.child
        word = ra.node_input("word", bound=V)
        emb, embM = ra.weight("emb", (V, H)), ra.weight("embM", (V, H, H))
        W, b, WM = ra.weight("W", (H, 2 * H)), ra.weight("b", (H,)), ra.weight("WM", (H, 2 * H))
        a, A = ra.rec_placeholder("a", (H,)), ra.rec_placeholder("A", (H, H))

        leaf_a = ra.compute((H,), lambda i: emb[word[n], i], name="leaf_a")
        leaf_A = ra.compute((H, H), lambda i, j: embM[word[n], i, j], name="leaf_A")

        # mixed[0] = B a (right matrix, left vector), mixed[1] = A b
        k = ra.reduce_axis(H, "k")
        mixed = ra.compute((2, H), lambda q, i: ra.sum(A[child(n, 1 - q), i, k] * a[child(n, q), k], k),
                           name="mixed")
        q2, k2 = ra.reduce_axis(2, "q2"), ra.reduce_axis(H, "k2")
        internal_a = ra.compute((H,), lambda i: ra.tanh(ra.sum(W[i, q2 * H + k2] * mixed[q2, k2], [q2, k2]) + b[i]),
                                name="internal_a")
        q3, k3 = ra.reduce_axis(2, "q3"), ra.reduce_axis(H, "k3")
        internal_A = ra.compute((H, H), lambda i, j: ra.sum(WM[i, q3 * H + k3] * A[child(n, q3), k3, j], [q3, k3]),
                                name="internal_A")
        return ra.rec_compute(tree, {a: (leaf_a, internal_a), A: (leaf_A, internal_A)})

    def numpy_forward(self, lin):
        w, H = self.weights, self.hidden_size
        a = np.zeros((lin.num_slots, H), np.float32)
        A = np.zeros((lin.num_slots, H, H), np.float32)
        lo = lin.level_offsets
        words = lin.words[lo[0]:lo[1]]
        a[lo[0]:lo[1]], A[lo[0]:lo[1]] = w["emb"][words], w["embM"][words]
        for start, end in zip(lo[1:-1], lo[2:]):
            kids = lin.children[start:end]
            al, ar, Al, Ar = a[kids[:, 0]], a[kids[:, 1]], A[kids[:, 0]], A[kids[:, 1]]
            mixed = np.concatenate([np.einsum("nij,nj->ni", Ar, al), np.einsum("nij,nj->ni", Al, ar)], 1)
            a[start:end] = np.tanh(mixed @ w["W"].T + w["b"])
            A[start:end] = np.einsum("ik,nkj->nij", w["WM"], np.concatenate([Al, Ar], 1))
        return [a, A]

    def flops(self, lin):
        H = self.hidden_size
        _, internal = count_leaves_internal(lin)
        return 2.0 * (2 * H * H + H * 2 * H + H * 2 * H * H) * internal
