"""Independent float64 numpy references for the new zoo models, one node at a time.

Written from the documented equations; only the node types and
`cortex_tvm.data.dag_postorder` (which equals `postorder` on trees) are used.
Each function returns, per structure, the first state of every distinct
node in `dag_postorder` order: a list of arrays (n_i, *state shape).
"""
from __future__ import annotations

import numpy as np

from cortex_tvm.data import dag_postorder


def _f64(weights):
    return {k: np.asarray(v, dtype=np.float64) for k, v in weights.items()}


def _s(x):
    return 1.0 / (1.0 + np.exp(-x))


def _walk(structures, leaf_fn, internal_fn):
    """Visit every distinct node, children first; state[id(node)] = fn(node, state)."""
    out = []
    for root in structures:
        order = dag_postorder(root)
        state = {}
        for node in order:
            state[id(node)] = leaf_fn(node) if node.is_leaf else internal_fn(node, state)
        out.append(np.stack([np.asarray(state[id(n)][0]) for n in order]))
    return out


def tree_gru(trees, weights):
    w = _f64(weights)
    H = w["Uh"].shape[0]

    def leaf(node):
        g = w["W"] @ w["emb"][node.word] + w["bW"]
        return ((1 - _s(g[:H])) * np.tanh(g[H:]),)

    def internal(node, st):
        hl, hr = (st[id(c)][0] for c in node.children) if len(node.children) == 2 else \
            (st[id(node.children[0])][0], np.zeros(H))
        g = w["U"] @ np.concatenate([hl, hr]) + w["bU"]
        z, rl, rr = _s(g[:H]), _s(g[H:2 * H]), _s(g[2 * H:])
        u = np.tanh(w["Uh"] @ np.concatenate([rl * hl, rr * hr]) + w["bUh"])
        return (z * (hl + hr) + (1 - z) * u,)
    return _walk(trees, leaf, internal)


def child_sum_tree_lstm(trees, weights):
    w = _f64(weights)
    H = w["U_f"].shape[0]

    def leaf(node):
        g = w["W_iou"] @ w["emb"][node.word] + w["b_iou"] + w["bU_iou"]
        c = _s(g[:H]) * np.tanh(g[2 * H:])
        return _s(g[H:2 * H]) * np.tanh(c), c

    def internal(node, st):
        # Dependency Tree-LSTM: x = emb[word] on an inner node that has a word, else 0
        x = w["emb"][node.word] if node.word is not None else np.zeros(w["emb"].shape[1])
        hs = [st[id(k)][0] for k in node.children]
        cs = [st[id(k)][1] for k in node.children]
        g = w["W_iou"] @ x + w["U_iou"] @ np.sum(hs, 0) + w["b_iou"] + w["bU_iou"]
        c = _s(g[:H]) * np.tanh(g[2 * H:])
        for hk, ck in zip(hs, cs):
            c = c + _s(w["W_f"] @ x + w["U_f"] @ hk + w["bU_f"] + w["b_f"]) * ck
        return _s(g[H:2 * H]) * np.tanh(c), c
    return _walk(trees, leaf, internal)


def mv_rnn(trees, weights):
    w = _f64(weights)
    H = w["W"].shape[0]

    def leaf(node):
        return w["emb"][node.word], w["embM"][node.word]

    def internal(node, st):
        (a, A), (b, B) = (st[id(c)] for c in node.children)
        p = np.tanh(w["W"] @ np.concatenate([B @ a, A @ b]) + w["b"])
        P = w["WM"] @ np.concatenate([A, B], 0)
        return p, P
    assert H
    return _walk(trees, leaf, internal)


def dag_rnn(dags, weights):
    w = _f64(weights)

    def leaf(node):
        return (np.tanh(w["Wx"] @ w["emb"][node.word] + w["b"]),)

    def internal(node, st):
        x = w["emb"][node.word] if node.word is not None else np.zeros(w["emb"].shape[1])
        total = np.sum([st[id(p)][0] for p in node.children], 0)
        return (np.tanh(w["Wx"] @ x + w["U"] @ total + w["b"]),)
    return _walk(dags, leaf, internal)


def seq_lstm_last(word_lists, weights):
    """h_T of each sequence, by a plain loop over the words."""
    w = _f64(weights)
    H = w["W_hh"].shape[1]
    out = []
    for words in word_lists:
        h, c = np.zeros(H), np.zeros(H)
        for t in words:
            g = w["W_ih"] @ w["emb"][t] + w["b_ih"] + w["W_hh"] @ h + w["b_hh"]
            i, f, gg, o = (g[q * H:(q + 1) * H] for q in range(4))
            c = _s(f) * c + _s(i) * np.tanh(gg)
            h = _s(o) * np.tanh(c)
        out.append(h)
    return np.stack(out)


def seq_gru_last(word_lists, weights):
    w = _f64(weights)
    H = w["W_hh"].shape[1]
    out = []
    for words in word_lists:
        h = np.zeros(H)
        for t in words:
            gi = w["W_ih"] @ w["emb"][t] + w["b_ih"]
            gh = w["W_hh"] @ h + w["b_hh"]
            r, z = _s(gi[:H] + gh[:H]), _s(gi[H:2 * H] + gh[H:2 * H])
            n = np.tanh(gi[2 * H:] + r * gh[2 * H:])
            h = (1 - z) * n + z * h
        out.append(h)
    return np.stack(out)
