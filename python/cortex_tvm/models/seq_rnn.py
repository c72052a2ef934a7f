"""Sequence LSTM and GRU (PyTorch's nn.LSTM / nn.GRU cells) over chains.

A sequence x_1..x_T is a chain (`data.sequence`): element 1 is the leaf
`Node(word=x_1)`, element t > 1 is `Node(word=x_t, children=[element t-1])`.
Levels are positions, so a batch of sequences of different lengths is
computed position by position.  The leaf equations are the cell from a zero
state; an element without a word reads x = 0.  The compiled model returns h
of the last element of each sequence (PyTorch's h_n); `all_nodes=True`
lists the elements in order.
"""
from __future__ import annotations

import numpy as np

from .. import ra
from .base import WordModel
from .numpy_cells import lstm_cell, sigmoid, zero_states
from .structures import count_leaves_internal


def _rnn_aliases(module):
    out = {"emb.weight": "emb"}
    for ours, theirs in (("W_ih", "weight_ih_l0"), ("W_hh", "weight_hh_l0"),
                         ("b_ih", "bias_ih_l0"), ("b_hh", "bias_hh_l0")):
        out[theirs] = ours
        out[f"{module}.{theirs}"] = ours
    return out


class _SeqModel(WordModel):
    gates = 0
    reads_inner_words = True

    def weight_shapes(self):
        H, E, G = self.hidden_size, self.embed_size, self.gates
        return {**self.input_weights(), "W_ih": (G * H, E), "W_hh": (G * H, H), "b_ih": (G * H,), "b_hh": (G * H,)}

    def _inputs(self):
        """A chain (one child: the previous element), the node, its input (`node_vector`: x(e) and
        present) and the weights."""
        H, E, G = self.hidden_size, self.embed_size, self.gates
        return (ra.Tree(max_children=1), ra.node(), *self.node_vector(optional=True),
                ra.weight("W_ih", (G * H, E)), ra.weight("W_hh", (G * H, H)),
                ra.weight("b_ih", (G * H,)), ra.weight("b_hh", (G * H,)))

    def flops(self, lin):
        H, E, G = self.hidden_size, self.embed_size, self.gates
        leaves, internal = count_leaves_internal(lin)
        return 2.0 * G * H * E * leaves + 2.0 * G * H * (E + H) * internal


class SeqLSTM(_SeqModel):
    """LSTM over sequences (see module doc); returns h_T.  Gates in PyTorch's order [i; f; g; o].

    Weights (float32): `emb (V, E)`, `W_ih (4H, E)`, `W_hh (4H, H)`, `b_ih (4H,)`, `b_hh (4H,)`.
    gates = W_ih x_t + b_ih + W_hh h_{t-1} + b_hh; c_t = s(f) c_{t-1} + s(i) tanh(g);
    h_t = s(o) tanh(c_t); h_0 = c_0 = 0.
    PyTorch names (`aliases`): emb.weight, lstm.weight_ih_l0 (or weight_ih_l0), ... .
    """

    gates, aliases = 4, _rnn_aliases("lstm")

    def build_program(self):
        H, E, (chain, n, x_at, present, W_ih, W_hh, b_ih, b_hh) = self.hidden_size, self.embed_size, self._inputs()
        s, tanh, child = ra.sigmoid, ra.tanh, ra.child
        h, c = ra.rec_placeholder("h", (H,)), ra.rec_placeholder("c", (H,))

        e = ra.reduce_axis(E, "e")
        lg = ra.compute((4 * H,), lambda r: ra.sum(W_ih[r, e] * x_at(e), e) + b_ih[r] + b_hh[r],
                        name="leaf_gates")
        leaf_c = ra.compute((H,), lambda i: s(lg[i]) * tanh(lg[2 * H + i]), name="leaf_c")
        leaf_h = ra.compute((H,), lambda i: s(lg[3 * H + i]) * tanh(leaf_c[i]), name="leaf_h")

        x, e2, k = self.inner_vector(x_at, present), ra.reduce_axis(E, "e2"), ra.reduce_axis(H, "k")
        # two computes, one reduction each (see the report on `auto` + two sums in one compute)
        gi = ra.compute((4 * H,), lambda r: ra.sum(W_ih[r, e2] * x[e2], e2) + b_ih[r],
                        name="input_gates")
        gh = ra.compute((4 * H,), lambda r: ra.sum(W_hh[r, k] * h[child(n, 0), k], k) + b_hh[r], name="hidden_gates")
        internal_c = ra.compute((H,), lambda i: s(gi[H + i] + gh[H + i]) * c[child(n, 0), i]
                                + s(gi[i] + gh[i]) * tanh(gi[2 * H + i] + gh[2 * H + i]), name="internal_c")
        internal_h = ra.compute((H,), lambda i: s(gi[3 * H + i] + gh[3 * H + i]) * tanh(internal_c[i]),
                                name="internal_h")
        return ra.rec_compute(chain, {h: (leaf_h, internal_h), c: (leaf_c, internal_c)})

    def numpy_forward(self, lin):
        w, H = self.weights, self.hidden_size
        h, c = zero_states(lin, H, 2)
        lo = lin.level_offsets
        bias = w["b_ih"] + w["b_hh"]
        for start, end in zip(lo[:-1], lo[1:]):
            g = self.input_rows(lin, start, end) @ w["W_ih"].T
            first = start == lo[0]                     # h_0 = c_0 = 0 before the first elements
            if not first:
                prev = lin.children[start:end, :1]     # (m, 1): the previous element
                g = g + h[prev[:, 0]] @ w["W_hh"].T
            g = g + bias
            forget, cells = (None, None) if first else (g[:, None, H:2 * H], c[prev])
            h[start:end], c[start:end] = lstm_cell(g[:, :H], g[:, 3 * H:], g[:, 2 * H:3 * H], forget, cells)
        return [h, c]


class SeqGRU(_SeqModel):
    """GRU over sequences (see module doc); returns h_T.  Gates in PyTorch's order [r; z; n].

    Weights (float32): `emb (V, E)`, `W_ih (3H, E)`, `W_hh (3H, H)`, `b_ih (3H,)`, `b_hh (3H,)`.
    gi = W_ih x_t + b_ih, gh = W_hh h_{t-1} + b_hh; r = s(gi_r + gh_r); z = s(gi_z + gh_z);
    n = tanh(gi_n + r gh_n); h_t = (1 - z) n + z h_{t-1}; h_0 = 0.
    PyTorch names (`aliases`): emb.weight, gru.weight_ih_l0 (or weight_ih_l0), ... .
    """

    gates, aliases = 3, _rnn_aliases("gru")

    def build_program(self):
        H, E, (chain, n, x_at, present, W_ih, W_hh, b_ih, b_hh) = self.hidden_size, self.embed_size, self._inputs()
        s, tanh, child = ra.sigmoid, ra.tanh, ra.child
        h = ra.rec_placeholder("h", (H,))

        e = ra.reduce_axis(E, "e")
        lgi = ra.compute((3 * H,), lambda r: ra.sum(W_ih[r, e] * x_at(e), e) + b_ih[r], name="leaf_gates")
        leaf_h = ra.compute((H,), lambda i: (1.0 - s(lgi[H + i] + b_hh[H + i]))
                            * tanh(lgi[2 * H + i] + s(lgi[i] + b_hh[i]) * b_hh[2 * H + i]), name="leaf_h")

        x, e2, k = self.inner_vector(x_at, present), ra.reduce_axis(E, "e2"), ra.reduce_axis(H, "k")
        gi = ra.compute((3 * H,), lambda r: ra.sum(W_ih[r, e2] * x[e2], e2) + b_ih[r],
                        name="input_gates")
        gh = ra.compute((3 * H,), lambda r: ra.sum(W_hh[r, k] * h[child(n, 0), k], k) + b_hh[r], name="hidden_gates")
        internal_h = ra.compute(
            (H,), lambda i: (1.0 - s(gi[H + i] + gh[H + i])) * tanh(gi[2 * H + i] + s(gi[i] + gh[i]) * gh[2 * H + i])
            + s(gi[H + i] + gh[H + i]) * h[child(n, 0), i], name="internal_h")
        return ra.rec_compute(chain, {h: (leaf_h, internal_h)})

    def numpy_forward(self, lin):
        w, H = self.weights, self.hidden_size
        h = np.zeros((lin.num_slots, H), np.float32)
        lo = lin.level_offsets
        for start, end in zip(lo[:-1], lo[1:]):
            if start == lo[0]:
                hp = np.zeros((end - start, H), np.float32)
            else:
                hp = h[lin.children[start:end, 0]]
            gi = self.input_rows(lin, start, end) @ w["W_ih"].T + w["b_ih"]
            gh = hp @ w["W_hh"].T + w["b_hh"]
            r, z = sigmoid(gi[:, :H] + gh[:, :H]), sigmoid(gi[:, H:2 * H] + gh[:, H:2 * H])
            h[start:end] = (1 - z) * np.tanh(gi[:, 2 * H:] + r * gh[:, 2 * H:]) + z * hp
        return [h]
