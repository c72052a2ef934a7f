"""Binary TreeLSTM (Tai et al. 2015, N-ary TreeLSTM with N = 2)."""
from __future__ import annotations

import numpy as np

from .. import ra
from .base import WordModel, sigmoid


class TreeLSTM(WordModel):
    """Binary TreeLSTM; returns the root h.

    Weights (float32, nn.Linear convention y = W x + b), E = embed size (H unless given):
    `emb (V, E)`; `W (3H, E)`, `bW (3H,)` with rows [i; o; u];
    `U (5H, 2H)`, `bU (5H,)` with rows [i; f_l; f_r; o; u] applied to [h_l; h_r].

    Leaf: x = emb[word]; i, o, u = W x + bW; c = s(i) tanh(u); h = s(o) tanh(c).
    Internal: c = s(i) tanh(u) + s(f_l) c_l + s(f_r) c_r; h = s(o) tanh(c).
    """

    aliases = {"emb.weight": "emb", "W.weight": "W", "W.bias": "bW", "U.weight": "U", "U.bias": "bU"}

    def weight_shapes(self):
        H, V, E = self.hidden_size, self.vocab_size, self.embed_size
        return {"emb": (V, E), "W": (3 * H, E), "bW": (3 * H,), "U": (5 * H, 2 * H), "bU": (5 * H,)}

    def build_program(self):
        H, V, E = self.hidden_size, self.vocab_size, self.embed_size
        tree, n = ra.Tree(max_children=2), ra.node()
        s, tanh, child = ra.sigmoid, ra.tanh, ra.child
        word = ra.node_input("word", bound=V)
        emb, W, bW = ra.weight("emb", (V, E)), ra.weight("W", (3 * H, E)), ra.weight("bW", (3 * H,))
        U, bU = ra.weight("U", (5 * H, 2 * H)), ra.weight("bU", (5 * H,))
        h, c = ra.rec_placeholder("h", (H,)), ra.rec_placeholder("c", (H,))

        # leaf: [i; o; u] = W emb[word] + bW, as iou[gate, unit]
        LI, LO, LU = range(3)
        e = ra.reduce_axis(E, "e")
        iou = ra.compute((3, H), lambda g, i: ra.sum(W[g * H + i, e] * emb[word[n], e], e) + bW[g * H + i],
                         name="leaf_gates")
        leaf_c = ra.compute((H,), lambda i: s(iou[LI, i]) * tanh(iou[LU, i]), name="leaf_c")
        leaf_h = ra.compute((H,), lambda i: s(iou[LO, i]) * tanh(leaf_c[i]), name="leaf_h")

        # internal: [i; f_l; f_r; o; u] = U [h_l; h_r] + bU, as gates[gate, unit]
        # (distinct names: the bodies run later, at lowering, and see these names then)
        I, FL, FR, O, U_ = range(5)
        j, k = ra.reduce_axis(2, "j"), ra.reduce_axis(H, "k")
        gates = ra.compute((5, H), lambda g, i: ra.sum(U[g * H + i, j * H + k] * h[child(n, j), k], [j, k])
                           + bU[g * H + i], name="gates")
        internal_c = ra.compute((H,), lambda i: s(gates[I, i]) * tanh(gates[U_, i])
                                + s(gates[FL, i]) * c[child(n, 0), i] + s(gates[FR, i]) * c[child(n, 1), i],
                                name="internal_c")
        internal_h = ra.compute((H,), lambda i: s(gates[O, i]) * tanh(internal_c[i]), name="internal_h")
        return ra.rec_compute(tree, {h: (leaf_h, internal_h), c: (leaf_c, internal_c)})

    def numpy_forward(self, lin):
        w, H = self.weights, self.hidden_size
        h = np.zeros((lin.num_slots, H), np.float32)
        c = np.zeros((lin.num_slots, H), np.float32)
        lo = lin.level_offsets
        gates = w["emb"][lin.words[lo[0]:lo[1]]] @ w["W"].T + w["bW"]
        i, o, u = gates[:, :H], gates[:, H:2 * H], gates[:, 2 * H:]
        c[lo[0]:lo[1]] = sigmoid(i) * np.tanh(u)
        h[lo[0]:lo[1]] = sigmoid(o) * np.tanh(c[lo[0]:lo[1]])
        for start, end in zip(lo[1:-1], lo[2:]):
            kids = lin.children[start:end]
            x = np.concatenate([h[kids[:, 0]], h[kids[:, 1]]], axis=1)
            g = x @ w["U"].T + w["bU"]
            i, fl, fr, o, u = (g[:, q * H:(q + 1) * H] for q in range(5))
            c[start:end] = sigmoid(i) * np.tanh(u) + sigmoid(fl) * c[kids[:, 0]] + sigmoid(fr) * c[kids[:, 1]]
            h[start:end] = sigmoid(o) * np.tanh(c[start:end])
        return [h, c]

    def flops(self, lin):
        H, E = self.hidden_size, self.embed_size
        leaves = int(lin.level_offsets[1] - lin.level_offsets[0])
        internal = int(lin.level_offsets[-1] - lin.level_offsets[1])
        return 2.0 * 3 * H * E * leaves + 2.0 * 5 * H * 2 * H * internal
