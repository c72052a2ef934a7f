"""Binary TreeGRU (an N-ary tree GRU with N = 2)."""
from __future__ import annotations

import numpy as np

from .. import ra
from .base import WordModel
from .numpy_cells import sigmoid
from .structures import count_leaves_internal


class TreeGRU(WordModel):
    """Binary TreeGRU; returns the root h.  s = sigmoid.

    Weights (float32, nn.Linear convention y = W x + b), E = embed size (H unless given):
    `emb (V, E)`; `W (2H, E)`, `bW (2H,)` with rows [z; u];
    `U (3H, 2H)`, `bU (3H,)` with rows [z; r_l; r_r] applied to [h_l; h_r];
    `Uh (H, 2H)`, `bUh (H,)` applied to [r_l * h_l; r_r * h_r].

    Leaf (a GRU step from a zero state): x = emb[word]; z = s(W_z x + bW_z);
    u = tanh(W_u x + bW_u); h = (1 - z) u.
    Internal: z, r_l, r_r = s(U [h_l; h_r] + bU); u = tanh(Uh [r_l h_l; r_r h_r] + bUh);
    h = z (h_l + h_r) + (1 - z) u.
    PyTorch names (`aliases`): emb.weight, W.weight/bias, U.weight/bias, Uh.weight/bias.
    """

    aliases = {"emb.weight": "emb", "W.weight": "W", "W.bias": "bW", "U.weight": "U", "U.bias": "bU",
               "Uh.weight": "Uh", "Uh.bias": "bUh"}

    def weight_shapes(self):
        H, E = self.hidden_size, self.embed_size
        return {**self.input_weights(), "W": (2 * H, E), "bW": (2 * H,), "U": (3 * H, 2 * H), "bU": (3 * H,),
                "Uh": (H, 2 * H), "bUh": (H,)}

    def build_program(self):
        H, E = self.hidden_size, self.embed_size
        tree, n, s, child = ra.Tree(max_children=2), ra.node(), ra.sigmoid, ra.child
        x, _ = self.node_vector()
        W, bW = ra.weight("W", (2 * H, E)), ra.weight("bW", (2 * H,))
        U, bU = ra.weight("U", (3 * H, 2 * H)), ra.weight("bU", (3 * H,))
        Uh, bUh = ra.weight("Uh", (H, 2 * H)), ra.weight("bUh", (H,))
        h = ra.rec_placeholder("h", (H,))

        e = ra.reduce_axis(E, "e")
        zu = ra.compute((2 * H,), lambda r: ra.sum(W[r, e] * x(e), e) + bW[r], name="leaf_gates")
        leaf_h = ra.compute((H,), lambda i: (1.0 - s(zu[i])) * ra.tanh(zu[H + i]), name="leaf_h")

        j, k = ra.reduce_axis(2, "j"), ra.reduce_axis(H, "k")
        gates = ra.compute((3 * H,), lambda r: ra.sum(U[r, j * H + k] * h[child(n, j), k], [j, k]) + bU[r],
                           name="gates")
        rh = ra.compute((2, H), lambda q, i: s(gates[H + q * H + i]) * h[child(n, q), i], name="reset_h")
        j2, k2 = ra.reduce_axis(2, "j2"), ra.reduce_axis(H, "k2")
        cand = ra.compute((H,), lambda i: ra.tanh(ra.sum(Uh[i, j2 * H + k2] * rh[j2, k2], [j2, k2]) + bUh[i]),
                          name="candidate")
        internal_h = ra.compute((H,), lambda i: s(gates[i]) * (h[child(n, 0), i] + h[child(n, 1), i])
                                + (1.0 - s(gates[i])) * cand[i], name="internal_h")
        return ra.rec_compute(tree, {h: (leaf_h, internal_h)})

    def numpy_forward(self, lin):
        w, H = self.weights, self.hidden_size
        h = np.zeros((lin.num_slots, H), np.float32)
        lo = lin.level_offsets
        g = self.input_rows(lin, lo[0], lo[1]) @ w["W"].T + w["bW"]
        h[lo[0]:lo[1]] = (1 - sigmoid(g[:, :H])) * np.tanh(g[:, H:])
        for start, end in zip(lo[1:-1], lo[2:]):
            kids = lin.children[start:end]
            hl, hr = h[kids[:, 0]], h[kids[:, 1]]
            g = np.concatenate([hl, hr], 1) @ w["U"].T + w["bU"]
            z, rl, rr = sigmoid(g[:, :H]), sigmoid(g[:, H:2 * H]), sigmoid(g[:, 2 * H:])
            u = np.tanh(np.concatenate([rl * hl, rr * hr], 1) @ w["Uh"].T + w["bUh"])
            h[start:end] = z * (hl + hr) + (1 - z) * u
        return [h]

    def flops(self, lin):
        H, E = self.hidden_size, self.embed_size
        leaves, internal = count_leaves_internal(lin)
        return 2.0 * 2 * H * E * leaves + 2.0 * (3 * H * 2 * H + H * 2 * H) * internal
