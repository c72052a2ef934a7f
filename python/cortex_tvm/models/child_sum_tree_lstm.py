"""Child-sum TreeLSTM (Tai et al. 2015), n-ary, one forget gate per child."""
from __future__ import annotations

from .. import ra
from .base import WordModel, check_sizes
from .numpy_cells import lstm_cell, zero_states
from .structures import count_leaves_internal


class ChildSumTreeLSTM(WordModel):
    """Child-sum TreeLSTM on trees of up to `max_children` children; returns the root h.

    Weights (float32, nn.Linear convention y = W x + b), E = embed size (H unless given),
    laid out like the usual PyTorch module (ioux, iouh, fx, fh Linear layers):
    `emb (V, E)`; `W_iou (3H, E)`, `b_iou (3H,)`; `U_iou (3H, H)`, `bU_iou (3H,)`
    (rows [i; o; u]); `W_f (H, E)`, `b_f (H,)`; `U_f (H, H)`, `bU_f (H,)`.

    A node's input x is emb[word] at every node that has a word and 0 at a
    node without one (`Node(word=w, children=[...])` puts a word on an inner
    node): on dependency trees (`data.load_conllu`) this is Tai et al.'s
    Dependency Tree-LSTM.  The biases always act.  `inner_words=False` builds
    the cheaper program of constituency trees (x only at leaves, `W_f` unused;
    a word on an inner node is then a ValueError).  With
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

    def __init__(self, hidden_size: int, vocab_size: int | None = None, max_children: int = 4,
                 embed_size: int | None = None, seed: int = 0, inner_words: bool = True, inputs: str = "words"):
        if not isinstance(inner_words, bool):
            raise TypeError(f"inner_words must be a bool, got {type(inner_words).__name__}")
        self.reads_inner_words = inner_words
        check_sizes(max_children=max_children)
        self._max_children = int(max_children)
        super().__init__(hidden_size, vocab_size, embed_size, seed, inputs)

    @property
    def max_children(self) -> int:
        return self._max_children

    def weight_shapes(self):
        H, E = self.hidden_size, self.embed_size
        return {**self.input_weights(), "W_iou": (3 * H, E), "b_iou": (3 * H,), "U_iou": (3 * H, H),
                "bU_iou": (3 * H,), "W_f": (H, E), "b_f": (H,), "U_f": (H, H), "bU_f": (H,)}

    def build_program(self):
        H, E, K = self.hidden_size, self.embed_size, self._max_children
        tree, n, s, tanh, child = ra.Tree(max_children=K), ra.node(), ra.sigmoid, ra.tanh, ra.child
        x, present = self.node_vector(optional=self.reads_inner_words)
        W_iou, b_iou = ra.weight("W_iou", (3 * H, E)), ra.weight("b_iou", (3 * H,))
        U_iou, bU_iou = ra.weight("U_iou", (3 * H, H)), ra.weight("bU_iou", (3 * H,))
        b_f, U_f, bU_f = ra.weight("b_f", (H,)), ra.weight("U_f", (H, H)), ra.weight("bU_f", (H,))
        h, c = ra.rec_placeholder("h", (H,)), ra.rec_placeholder("c", (H,))

        e = ra.reduce_axis(E, "e")
        # x reads word.index: in range even where an inner node without a word holds the marker
        iou = ra.compute((3 * H,), lambda r: ra.sum(W_iou[r, e] * x(e), e) + b_iou[r] + bU_iou[r],
                         name="leaf_gates")
        leaf_c = ra.compute((H,), lambda i: s(iou[i]) * tanh(iou[2 * H + i]), name="leaf_c")
        leaf_h = ra.compute((H,), lambda i: s(iou[H + i]) * tanh(leaf_c[i]), name="leaf_h")

        j = ra.reduce_axis(K, "j")
        h_sum = ra.compute((H,), lambda k: ra.sum(h[child(n, j), k], j), name="h_sum")
        x_iou, x_f = self._inner_inputs(x, present, W_iou) if self.reads_inner_words else (None, None)
        k = ra.reduce_axis(H, "k")
        def with_x(value, x_term, i):          # the same expression as before when x is never read
            return value if x_term is None else value + x_term[i]

        gates = ra.compute((3 * H,), lambda r: with_x(ra.sum(U_iou[r, k] * h_sum[k], k) + b_iou[r] + bU_iou[r],
                                                      x_iou, r), name="gates")
        k2 = ra.reduce_axis(H, "k2")
        forget = ra.compute((K, H), lambda q, i: s(with_x(ra.sum(U_f[i, k2] * h[child(n, q), k2], k2)
                                                          + bU_f[i] + b_f[i], x_f, i)), name="forget")
        j2 = ra.reduce_axis(K, "j2")
        internal_c = ra.compute((H,), lambda i: s(gates[i]) * tanh(gates[2 * H + i])
                                + ra.sum(forget[j2, i] * c[child(n, j2), i], j2), name="internal_c")
        internal_h = ra.compute((H,), lambda i: s(gates[H + i]) * tanh(internal_c[i]), name="internal_h")
        return ra.rec_compute(tree, {h: (leaf_h, internal_h), c: (leaf_c, internal_c)})

    def _inner_inputs(self, x, present, W_iou):
        """W_iou x and W_f x at an inner node, x = its input where it has one, else 0."""
        H, E = self.hidden_size, self.embed_size
        W_f = ra.weight("W_f", (H, E))
        x = self.inner_vector(x, present)
        e1, e2 = ra.reduce_axis(E, "e1"), ra.reduce_axis(E, "e2")
        x_iou = ra.compute((3 * H,), lambda r: ra.sum(W_iou[r, e1] * x[e1], e1), name="input_iou")
        x_f = ra.compute((H,), lambda i: ra.sum(W_f[i, e2] * x[e2], e2), name="input_f")
        return x_iou, x_f

    def numpy_forward(self, lin):
        w, H = self.weights, self.hidden_size
        h, c = zero_states(lin, H, 2)
        lo = lin.level_offsets
        bias = w["b_iou"] + w["bU_iou"]
        x = self.input_rows(lin)          # x = 0 where a node has no word
        if not self.reads_inner_words:    # inner nodes read x = 0 (their slots hold word 0)
            x = x * (lin.num_children == 0)[:, None]
        g = x[lo[0]:lo[1]] @ w["W_iou"].T + bias
        h[lo[0]:lo[1]], c[lo[0]:lo[1]] = lstm_cell(g[:, :H], g[:, H:2 * H], g[:, 2 * H:])
        for start, end in zip(lo[1:-1], lo[2:]):
            kids = lin.children[start:end]                     # (m, K), null slot 0 where absent
            hk = h[kids]                                       # (m, K, H)
            g = hk.sum(1) @ w["U_iou"].T + bias + x[start:end] @ w["W_iou"].T
            f = hk @ w["U_f"].T + w["bU_f"] + w["b_f"] + (x[start:end] @ w["W_f"].T)[:, None]
            h[start:end], c[start:end] = lstm_cell(g[:, :H], g[:, H:2 * H], g[:, 2 * H:], f, c[kids])
        return [h, c]

    def flops(self, lin):
        H, E, K = self.hidden_size, self.embed_size, self._max_children
        leaves, internal = count_leaves_internal(lin)
        inner_x = 2.0 * 4 * H * E * internal if self.reads_inner_words else 0.0
        return 2.0 * 3 * H * E * leaves + 2.0 * (3 * H * H + K * H * H) * internal + inner_x
