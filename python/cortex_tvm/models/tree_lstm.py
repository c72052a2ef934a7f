"""Binary TreeLSTM (Tai et al. 2015, N-ary TreeLSTM with N = 2)."""
from __future__ import annotations

import numpy as np

from .. import ra
from .base import WordModel
from .numpy_cells import lstm_cell, zero_states


class TreeLSTM(WordModel):
    """Binary TreeLSTM; returns the root h.

    Weights (float32, nn.Linear convention y = W x + b), E = embed size (H unless given):
    `emb (V, E)` (none with inputs="features": x is the node's row of the batch's features);
    `W (3H, E)`, `bW (3H,)` with rows [i; o; u];
    `U (5H, 2H)`, `bU (5H,)` with rows [i; f_l; f_r; o; u] applied to [h_l; h_r].

    Leaf: x = emb[word]; i, o, u = W x + bW; c = s(i) tanh(u); h = s(o) tanh(c).
    Internal: c = s(i) tanh(u) + s(f_l) c_l + s(f_r) c_r; h = s(o) tanh(c).

    `inner_words=True` also reads a word on an inner node (`Node(word=w,
    children=[...])`): such a node adds its input transform W x + bW to its
    i, o, u gates (U has no input part for the forget gates); an inner node
    without a word adds nothing, so it computes exactly as above.  The default
    (False) keeps the cheaper program and rejects words on inner nodes.
    """

    aliases = {"emb.weight": "emb", "W.weight": "W", "W.bias": "bW", "U.weight": "U", "U.bias": "bU"}

    def __init__(self, hidden_size: int, vocab_size: int | None = None, embed_size: int | None = None,
                 seed: int = 0, inner_words: bool = False, inputs: str = "words"):
        if not isinstance(inner_words, bool):
            raise TypeError(f"inner_words must be a bool, got {type(inner_words).__name__}")
        self.reads_inner_words = inner_words
        super().__init__(hidden_size, vocab_size, embed_size, seed, inputs)

    def weight_shapes(self):
        H, E = self.hidden_size, self.embed_size
        return {**self.input_weights(), "W": (3 * H, E), "bW": (3 * H,), "U": (5 * H, 2 * H), "bU": (5 * H,)}

    def build_program(self):
        H, E = self.hidden_size, self.embed_size
        tree, n = ra.Tree(max_children=2), ra.node()
        s, tanh, child = ra.sigmoid, ra.tanh, ra.child
        x, present = self.node_vector(optional=self.reads_inner_words)
        W, bW = ra.weight("W", (3 * H, E)), ra.weight("bW", (3 * H,))
        U, bU = ra.weight("U", (5 * H, 2 * H)), ra.weight("bU", (5 * H,))
        h, c = ra.rec_placeholder("h", (H,)), ra.rec_placeholder("c", (H,))

        # leaf: [i; o; u] = W x + bW, as iou[gate, unit]
        LI, LO, LU = range(3)
        e = ra.reduce_axis(E, "e")
        iou = ra.compute((3, H), lambda g, i: ra.sum(W[g * H + i, e] * x(e), e) + bW[g * H + i],
                         name="leaf_gates")
        leaf_c = ra.compute((H,), lambda i: s(iou[LI, i]) * tanh(iou[LU, i]), name="leaf_c")
        leaf_h = ra.compute((H,), lambda i: s(iou[LO, i]) * tanh(leaf_c[i]), name="leaf_h")

        # internal: [i; f_l; f_r; o; u] = U [h_l; h_r] + bU, as gates[gate, unit]
        # (distinct names: the bodies run later, at lowering, and see these names then)
        I, FL, FR, O, U_ = range(5)
        j, k = ra.reduce_axis(2, "j"), ra.reduce_axis(H, "k")
        gates = ra.compute((5, H), lambda g, i: ra.sum(U[g * H + i, j * H + k] * h[child(n, j), k], [j, k])
                           + bU[g * H + i], name="gates")
        if self.reads_inner_words:
            # W x + bW where the node has an input, else 0 (added to i, o, u)
            inner_x = self.inner_vector(x, present)
            ex = ra.reduce_axis(E, "ex")
            xw = ra.compute((3, H), lambda g, i: ra.sum(W[g * H + i, ex] * inner_x[ex], ex), name="input_gates")
            xg = ra.compute((3, H), (lambda g, i: xw[g, i] + bW[g * H + i]) if present is None else
                            (lambda g, i: ra.if_then_else(present(n), xw[g, i] + bW[g * H + i], ra.zero())),
                            name="input_bias")

            def gate(g, i):
                return gates[g, i] + xg[{I: LI, O: LO, U_: LU}[g], i]
        else:
            def gate(g, i):
                return gates[g, i]
        internal_c = ra.compute((H,), lambda i: s(gate(I, i)) * tanh(gate(U_, i))
                                + s(gates[FL, i]) * c[child(n, 0), i] + s(gates[FR, i]) * c[child(n, 1), i],
                                name="internal_c")
        internal_h = ra.compute((H,), lambda i: s(gate(O, i)) * tanh(internal_c[i]), name="internal_h")
        return ra.rec_compute(tree, {h: (leaf_h, internal_h), c: (leaf_c, internal_c)})

    def numpy_forward(self, lin):
        w, H = self.weights, self.hidden_size
        h, c = zero_states(lin, H, 2)
        lo = lin.level_offsets
        gates = self.input_rows(lin, lo[0], lo[1]) @ w["W"].T + w["bW"]
        h[lo[0]:lo[1]], c[lo[0]:lo[1]] = lstm_cell(gates[:, :H], gates[:, H:2 * H], gates[:, 2 * H:])
        for start, end in zip(lo[1:-1], lo[2:]):
            kids = lin.children[start:end]
            x = np.concatenate([h[kids[:, 0]], h[kids[:, 1]]], axis=1)
            g = x @ w["U"].T + w["bU"]
            if self.reads_inner_words:
                present = self.has_input(lin, start, end)
                xg = (self.input_rows(lin, start, end) @ w["W"].T + w["bW"]) * present[:, None]
                for q, p in ((0, 0), (3, 1), (4, 2)):            # i, o, u get W x + bW
                    g[:, q * H:(q + 1) * H] += xg[:, p * H:(p + 1) * H]
            forget = g[:, H:3 * H].reshape(end - start, 2, H)            # [f_l; f_r]
            h[start:end], c[start:end] = lstm_cell(g[:, :H], g[:, 3 * H:4 * H], g[:, 4 * H:], forget, c[kids])
        return [h, c]

    def flops(self, lin):
        H, E = self.hidden_size, self.embed_size
        leaves = int(lin.level_offsets[1] - lin.level_offsets[0])
        internal = int(lin.level_offsets[-1] - lin.level_offsets[1])
        return 2.0 * 3 * H * E * leaves + 2.0 * 5 * H * 2 * H * internal
