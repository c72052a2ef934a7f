"""An independent numpy reference for the model zoo, written from the documented equations.

One node at a time, in post-order (iterative: no Python recursion, so trees
thousands of levels deep work), in float64.  Nothing here comes from
cortex_tvm's models or linearize; only the tree type and `postorder` are used.

Each function returns, per tree, the states of every node in
`cortex_tvm.data.postorder(tree)` order: a list of (n_i, H) float64 arrays.
A missing child (a node with fewer children than the model's arity)
contributes zero state.
"""
from __future__ import annotations

import numpy as np

from cortex_tvm.data import postorder


def _f64(weights):
    return {k: np.asarray(v, dtype=np.float64) for k, v in weights.items()}


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def _child_states(node, index, state, arity, H):
    """State rows of the node's children, zeros for absent ones (arity rows)."""
    rows = [state[index[id(ch)]] for ch in node.children]
    if len(rows) > arity:
        raise ValueError(f"reference: node has {len(rows)} children, more than {arity}")
    rows += [np.zeros(H)] * (arity - len(rows))
    return rows


def tree_fc(trees, weights):
    """TreeFC: leaf h = emb[word]; internal h = tanh(W (h_l + h_r) + b).  Returns [h per tree]."""
    w = _f64(weights)
    H = w["W"].shape[0]
    out = []
    for tree in trees:
        order = postorder(tree)
        index = {id(n): p for p, n in enumerate(order)}
        h = np.zeros((len(order), H))
        for p, node in enumerate(order):
            if node.is_leaf:
                h[p] = w["emb"][node.word]
            else:
                hl, hr = _child_states(node, index, h, 2, H)
                h[p] = np.tanh(w["W"] @ (hl + hr) + w["b"])
        out.append(h)
    return out


def tree_lstm(trees, weights):
    """Binary TreeLSTM (rows [i;o;u] for W, [i;f_l;f_r;o;u] for U).  Returns ([h per tree], [c per tree])."""
    w = _f64(weights)
    H = w["U"].shape[0] // 5
    hs, cs = [], []
    for tree in trees:
        order = postorder(tree)
        index = {id(n): p for p, n in enumerate(order)}
        h = np.zeros((len(order), H))
        c = np.zeros((len(order), H))
        for p, node in enumerate(order):
            if node.is_leaf:
                x = w["emb"][node.word]
                g = w["W"] @ x + w["bW"]
                i, o, u = g[:H], g[H:2 * H], g[2 * H:]
                c[p] = _sigmoid(i) * np.tanh(u)
            else:
                hl, hr = _child_states(node, index, h, 2, H)
                cl, cr = _child_states(node, index, c, 2, H)
                g = w["U"] @ np.concatenate([hl, hr]) + w["bU"]
                i, fl, fr, o, u = (g[q * H:(q + 1) * H] for q in range(5))
                if node.word is not None:       # TreeLSTM(inner_words=True): + W x + bW on i, o, u
                    x = w["W"] @ w["emb"][node.word] + w["bW"]
                    i, o, u = i + x[:H], o + x[H:2 * H], u + x[2 * H:]
                c[p] = _sigmoid(i) * np.tanh(u) + _sigmoid(fl) * cl + _sigmoid(fr) * cr
            h[p] = _sigmoid(o) * np.tanh(c[p])
        hs.append(h)
        cs.append(c)
    return hs, cs


def tree_rnn(trees, weights):
    """A TreeRNN with separate child matrices: leaf h = emb[word];
    internal h = tanh(Wl h_l + Wr h_r + b).  Returns [h per tree]."""
    w = _f64(weights)
    H = w["Wl"].shape[0]
    out = []
    for tree in trees:
        order = postorder(tree)
        index = {id(n): p for p, n in enumerate(order)}
        h = np.zeros((len(order), H))
        for p, node in enumerate(order):
            if node.is_leaf:
                h[p] = w["emb"][node.word]
            else:
                hl, hr = _child_states(node, index, h, 2, H)
                h[p] = np.tanh(w["Wl"] @ hl + w["Wr"] @ hr + w["b"])
        out.append(h)
    return out


def all_h(model_name, trees, weights):
    """Every node's h, per tree (postorder), for a zoo model by class name."""
    if model_name == "TreeFC":
        return tree_fc(trees, weights)
    if model_name == "TreeLSTM":
        return tree_lstm(trees, weights)[0]
    raise KeyError(model_name)


def roots(model_name, trees, weights):
    """Root h of each tree, (B, H) float64."""
    return np.stack([h[-1] for h in all_h(model_name, trees, weights)])
