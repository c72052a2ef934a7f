"""TreeFC (the CORTEX paper's running example; TreeRNN with a shared child sum)."""
from __future__ import annotations

import numpy as np

from .. import ra
from .base import WordModel


class TreeFC(WordModel):
    """Leaf h = emb[word]; internal h = tanh(W (h_l + h_r) + b).

    Weights (float32, nn.Linear convention y = W x + b):
    `emb (V, H)`, `W (H, H)`, `b (H,)`.
    """

    aliases = {"emb.weight": "emb", "W.weight": "W", "W.bias": "b"}

    def __init__(self, hidden_size: int, vocab_size: int | None = None, seed: int = 0, inputs: str = "words"):
        super().__init__(hidden_size, vocab_size, seed=seed, inputs=inputs)      # the input size is H

    @property
    def fixed_sizes(self) -> tuple:
        # fed features, a leaf's state is its feature row: H is the caller's width, so the
        # kernel may not pad it (padded units would read past the row)
        return ("hidden_size", "embed_size") if self.inputs == "features" else ()

    def weight_shapes(self):
        H = self.hidden_size
        return {**self.input_weights(), "W": (H, H), "b": (H,)}

    def build_program(self):
        H = self.hidden_size
        tree, n = ra.Tree(max_children=2), ra.node()
        x, _ = self.node_vector()
        W, b = ra.weight("W", (H, H)), ra.weight("b", (H,))
        h = ra.rec_placeholder("h", (H,))

        leaf_h = ra.compute((H,), lambda i: x(i), name="leaf_h")
        k = ra.reduce_axis(H, "k")
        child_sum = ra.compute((H,), lambda i: h[ra.child(n, 0), i] + h[ra.child(n, 1), i], name="child_sum")
        internal_h = ra.compute((H,), lambda i: ra.tanh(ra.sum(W[i, k] * child_sum[k], k) + b[i]),
                                name="internal_h")
        return ra.rec_compute(tree, {h: (leaf_h, internal_h)})

    def numpy_forward(self, lin):
        w = self.weights
        h = np.zeros((lin.num_slots, self.hidden_size), np.float32)
        lo = lin.level_offsets
        h[lo[0]:lo[1]] = self.input_rows(lin, lo[0], lo[1])
        for start, end in zip(lo[1:-1], lo[2:]):
            kids = lin.children[start:end]
            h[start:end] = np.tanh((h[kids[:, 0]] + h[kids[:, 1]]) @ w["W"].T + w["b"])
        return [h]

    def flops(self, lin):
        internal = int(lin.level_offsets[-1] - lin.level_offsets[1])
        return 2.0 * self.hidden_size ** 2 * internal
