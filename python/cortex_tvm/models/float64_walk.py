"""An independent float64 reference for the model zoo: one node at a time, on the user's `Node`s.

`reference64(model, structures)` walks each structure itself (an explicit
stack, so chains thousands of elements long are fine; a node shared by several
parents, as in a DAG, is computed once), evaluates every node from its word and
its children's states with the model's weights cast to float64, and returns the
roots' first state.  It shares nothing with the level-batched executors
(`numpy_forward`) beyond the weights: no linearizer, no slots, no levels, not
even the numpy LSTM cell (`numpy_cells.lstm_cell`), whose mistakes it exists to catch.
The equations are the ones each model's docstring states.

Each `_<model>` below takes the model and its float64 weights and returns
`(cell, zero)`: `cell(word, kids)` is one node's state tuple from its word
(None where it has none: x = 0) and its children's state tuples (None at a
leaf, else padded with `zero` to the model's arity, as a missing child reads
the null node); `zero` is the all-zero state tuple.
"""
from __future__ import annotations

import numpy as np

from ..data import Node, dag_postorder, postorder
from .child_sum_tree_lstm import ChildSumTreeLSTM
from .dag_rnn import DAGRNN
from .mv_rnn import MVRNN
from .seq_rnn import SeqGRU, SeqLSTM
from .tree_fc import TreeFC
from .tree_gru import TreeGRU
from .tree_lstm import TreeLSTM

__all__ = ["reference64"]


def _s(v):
    return 1.0 / (1.0 + np.exp(-v))


def _cell_state(i, o, u, gated_cells):
    """LSTM (h, c) from gate pre-activations; gated_cells: the terms s(f_k) c_k."""
    c = _s(i) * np.tanh(u) + sum(gated_cells, np.zeros_like(i))
    return _s(o) * np.tanh(c), c


def _x(w, word):
    """A node's input: emb[word], 0 without a word; a feature row (inputs="features") as it is."""
    if isinstance(word, np.ndarray):
        return word
    return np.zeros(w["emb"].shape[1]) if word is None else w["emb"][word]


def _tree_lstm(model, w):
    H = model.hidden_size

    def cell(word, kids):
        if kids is None:
            i, o, u = np.split(w["W"] @ _x(w, word) + w["bW"], 3)
            return _cell_state(i, o, u, [])
        (hl, cl), (hr, cr) = kids
        i, fl, fr, o, u = np.split(w["U"] @ np.concatenate([hl, hr]) + w["bU"], 5)
        if word is not None:                   # inner_words=True: W x + bW joins i, o, u
            xi, xo, xu = np.split(w["W"] @ _x(w, word) + w["bW"], 3)
            i, o, u = i + xi, o + xo, u + xu
        return _cell_state(i, o, u, [_s(fl) * cl, _s(fr) * cr])
    return cell, (np.zeros(H), np.zeros(H))


def _tree_fc(model, w):
    def cell(word, kids):
        if kids is None:
            return (_x(w, word),)
        return (np.tanh(w["W"] @ (kids[0][0] + kids[1][0]) + w["b"]),)
    return cell, (np.zeros(model.hidden_size),)


def _tree_gru(model, w):
    def cell(word, kids):
        if kids is None:
            z, u = np.split(w["W"] @ _x(w, word) + w["bW"], 2)
            return ((1.0 - _s(z)) * np.tanh(u),)
        (hl,), (hr,) = kids
        z, rl, rr = (_s(v) for v in np.split(w["U"] @ np.concatenate([hl, hr]) + w["bU"], 3))
        u = np.tanh(w["Uh"] @ np.concatenate([rl * hl, rr * hr]) + w["bUh"])
        return (z * (hl + hr) + (1.0 - z) * u,)
    return cell, (np.zeros(model.hidden_size),)


def _child_sum(model, w):
    H = model.hidden_size

    def cell(word, kids):
        x = _x(w, word)
        kids = kids or []
        h_sum = sum((h for h, _ in kids), np.zeros(H))
        i, o, u = np.split(w["W_iou"] @ x + w["b_iou"] + w["U_iou"] @ h_sum + w["bU_iou"], 3)
        fx = w["W_f"] @ x + w["b_f"]
        return _cell_state(i, o, u, [_s(fx + w["U_f"] @ h + w["bU_f"]) * c for h, c in kids])
    return cell, (np.zeros(H), np.zeros(H))


def _mv_rnn(model, w):
    H = model.hidden_size

    def cell(word, kids):
        if kids is None:
            return _x(w, word), w["embM"][word]
        (a, A), (b, B) = kids
        return np.tanh(w["W"] @ np.concatenate([B @ a, A @ b]) + w["b"]), w["WM"] @ np.vstack([A, B])
    return cell, (np.zeros(H), np.zeros((H, H)))


def _dag_rnn(model, w):
    def cell(word, kids):
        x = _x(w, word)
        preds = sum((h for (h,) in kids or []), np.zeros(model.hidden_size))
        return (np.tanh(w["Wx"] @ x + w["U"] @ preds + w["b"]),)
    return cell, (np.zeros(model.hidden_size),)


def _seq_lstm(model, w):
    H = model.hidden_size

    def cell(word, kids):
        (h, c), = kids or [(np.zeros(H), np.zeros(H))]
        x = _x(w, word)
        i, f, g, o = np.split(w["W_ih"] @ x + w["b_ih"] + w["W_hh"] @ h + w["b_hh"], 4)
        return _cell_state(i, o, g, [_s(f) * c])
    return cell, (np.zeros(H), np.zeros(H))


def _seq_gru(model, w):
    H = model.hidden_size

    def cell(word, kids):
        (h,), = kids or [(np.zeros(H),)]
        x = _x(w, word)
        xr, xz, xn = np.split(w["W_ih"] @ x + w["b_ih"], 3)
        hr, hz, hn = np.split(w["W_hh"] @ h + w["b_hh"], 3)
        r, z = _s(xr + hr), _s(xz + hz)
        return ((1.0 - z) * np.tanh(xn + r * hn) + z * h,)
    return cell, (np.zeros(H),)


#: the zoo's classes -> their node functions (subclasses find theirs through the MRO)
_CELLS = {TreeLSTM: _tree_lstm, TreeFC: _tree_fc, TreeGRU: _tree_gru, ChildSumTreeLSTM: _child_sum,
          MVRNN: _mv_rnn, DAGRNN: _dag_rnn, SeqLSTM: _seq_lstm, SeqGRU: _seq_gru}


def _make_cell(model):
    for cls in type(model).__mro__:
        if cls in _CELLS:
            w = {k: np.asarray(v, dtype=np.float64) for k, v in model.weights.items()}
            return _CELLS[cls](model, w), w
    raise TypeError(f"reference64: no float64 reference for {type(model).__name__}")


def _evaluate(root, cell, zero, w, arity, inner_words, rows=None):
    """The root's state tuple, every distinct node evaluated once, children first."""
    done, open_ = {}, set()
    stack = [root]
    while stack:
        node = stack[-1]
        if id(node) in done:
            stack.pop()
            continue
        kids = node.children
        todo = [k for k in kids or () if id(k) not in done]
        if todo:
            if any(id(k) in open_ for k in todo):
                raise ValueError(f"reference64: {node!r} is its own descendant (a cycle)")
            open_.add(id(node))
            stack.extend(reversed(todo))
            continue
        stack.pop()
        open_.discard(id(node))
        x = _word(node, w, inner_words) if rows is None else \
            rows[id(node)] if kids is None or inner_words else None
        done[id(node)] = cell(x, _padded(node, kids, done, zero, arity))
    return done[id(root)]


def _word(node, w, inner_words):
    """The node's word, checked as the compiled model checks it (a negative id would index
    from the end here)."""
    word = node.word
    if word is not None and node.children is not None and not inner_words:
        raise ValueError(f"reference64: {node!r} has a word, but this model reads words only at leaves")
    if word is not None and not 0 <= word < w["emb"].shape[0]:
        raise ValueError(f"reference64: word {word} is outside the vocabulary [0, {w['emb'].shape[0]})")
    return word


def _padded(node, kids, done, zero, arity):
    if kids is None:
        return None
    if len(kids) > arity:
        raise ValueError(f"reference64: {node!r} has {len(kids)} children, more than {arity}")
    return [done[id(k)] for k in kids] + [zero] * (arity - len(kids))


def reference64(model, structures, features=None) -> np.ndarray:
    """The roots' first state in float64, (B, *state shape): one structure at a time, one node at
    a time, from `model.weights` (see the module doc).  `structures` are what the model is called
    on: trees, `data.sequence` chains or `data.grid_dag` DAGs (`Node`s).  A model built with
    inputs="features" reads node i's x from row i of `features` (nodes, E), the nodes listed
    structure by structure, each in `data.postorder` (`data.dag_postorder` for a DAG) order."""
    (cell, zero), w = _make_cell(model)
    arity = model.max_children
    for k, root in enumerate(structures):
        if not isinstance(root, Node):
            raise TypeError(f"reference64: structure {k} is a {type(root).__name__}, not a Node")
    rows = None
    if getattr(model, "inputs", "words") == "features":
        order = dag_postorder if model.program.spec.kind == "dag" else postorder
        nodes = [node for root in structures for node in order(root)]
        features = np.asarray(features, np.float64)
        if features.shape != (len(nodes), model.embed_size):
            raise ValueError(f"reference64: features of shape {features.shape}, expected "
                             f"({len(nodes)}, {model.embed_size})")
        rows = {id(node): row for node, row in zip(nodes, features)}
    return np.stack([_evaluate(root, cell, zero, w, arity, model.reads_inner_words, rows)[0]
                     for root in structures])
