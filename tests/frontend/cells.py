"""Recursive cells written with @ct.recursive, shared by the front-end tests.

The first four spell zoo models (same weight names and layouts as
`ct.models.*`); `gated_rnn` is in no zoo; `every_op` uses each supported
operation once so its numbers can be checked against a hand-written numpy
reference.  Each function is written the way a PyTorch user writes a cell.
"""
import numpy as np

import cortex_tvm as ct


@ct.recursive
def tree_fc(node, p):
    if node.is_leaf:
        return p.emb[node.word]
    left, right = tree_fc(node.children[0], p), tree_fc(node.children[1], p)
    return ct.tanh(p.W @ (left + right) + p.b)


@ct.recursive
def tree_lstm(node, p):
    if node.is_leaf:
        i, o, u = ct.split(p.W @ p.emb[node.word] + p.bW, 3)
        c = ct.sigmoid(i) * ct.tanh(u)
    else:
        (hl, cl), (hr, cr) = tree_lstm(node.children[0], p), tree_lstm(node.children[1], p)
        i, fl, fr, o, u = ct.split(p.U @ ct.concat([hl, hr]) + p.bU, 5)
        c = ct.sigmoid(i) * ct.tanh(u) + ct.sigmoid(fl) * cl + ct.sigmoid(fr) * cr
    return ct.sigmoid(o) * ct.tanh(c), c


@ct.recursive
def tree_gru(node, p):
    if node.is_leaf:
        z, u = ct.split(p.W @ p.emb[node.word] + p.bW, 2)
        return (1 - ct.sigmoid(z)) * ct.tanh(u)
    hl, hr = tree_gru(node.children[0], p), tree_gru(node.children[1], p)
    z, rl, rr = ct.split(ct.sigmoid(p.U @ ct.concat([hl, hr]) + p.bU), 3)
    u = ct.tanh(p.Uh @ ct.concat([rl * hl, rr * hr]) + p.bUh)
    return z * (hl + hr) + (1 - z) * u


@ct.recursive
def child_sum_lstm(node, p):
    if node.is_leaf:
        i, o, u = ct.split(p.W_iou @ p.emb[node.word] + p.b_iou + p.bU_iou, 3)
        c = ct.sigmoid(i) * ct.tanh(u)
    else:
        kids = [child_sum_lstm(child, p) for child in node.children]   # max_children slots
        h_sum = sum(h for h, _ in kids)                                   # missing children read 0
        i, o, u = ct.split(p.U_iou @ h_sum + p.b_iou + p.bU_iou, 3)
        c = ct.sigmoid(i) * ct.tanh(u)
        for h_k, c_k in kids:
            c = c + ct.sigmoid(p.U_f @ h_k + p.bU_f + p.b_f) * c_k
    return ct.sigmoid(o) * ct.tanh(c), c


@ct.recursive
def gated_rnn(node, p):
    """A gated TreeRNN: z * tanh(W [hl; hr] + b) + (1 - z) * (hl + hr) / 2, z = s(Wz [hl; hr] + bz)."""
    if node.is_leaf:
        return p.emb[node.word]
    hl, hr = gated_rnn(node.children[0], p), gated_rnn(node.children[1], p)
    x = ct.concat([hl, hr])
    z = ct.sigmoid(p.Wz @ x + p.bz)
    return z * ct.tanh(p.W @ x + p.b) + (1 - z) * (hl + hr) / 2


@ct.recursive
def every_op(node, p):
    """Each operation once: relu, exp, unary -, / by a tensor, a split without a product,
    concat read elementwise, a product of a weight vector, a product of a concat of unequal
    parts, numpy scalars, two states, three children."""
    if node.is_leaf:
        x = p.emb[node.word]
        a, b = ct.split(x, 2)
        return ct.concat([ct.relu(a), -b]), ct.exp(-ct.relu(x))
    (h0, s0), (h1, s1), (h2, s2) = (every_op(child, p) for child in node.children)
    y = ct.relu(p.A @ (h0 - np.float32(0.5) * h1) + p.A @ p.v) / (1.0 + s2)
    lo, hi = ct.split(h2, 2)
    z = p.B @ ct.concat([h0 * s1, hi])          # parts of unequal sizes: reduced part by part
    return ct.tanh(y + ct.concat([hi, lo]) + z), s0 * 0.25 + ct.exp(-y * y) / 3


@ct.recursive
def dependency_lstm(node, p):
    """The Dependency Tree-LSTM (child-sum, Tai et al.): x = emb[word] at every node, zeros at an
    inner node without a word."""
    x = p.emb[node.word]
    if node.is_leaf:
        i, o, u = ct.split(p.W_iou @ x + p.b_iou + p.bU_iou, 3)
        c = ct.sigmoid(i) * ct.tanh(u)
    else:
        kids = [dependency_lstm(child, p) for child in node.children]
        h_sum = sum(h for h, _ in kids)
        i, o, u = ct.split(p.U_iou @ h_sum + p.W_iou @ x + p.b_iou + p.bU_iou, 3)
        c = ct.sigmoid(i) * ct.tanh(u)
        for h_k, c_k in kids:
            c = c + ct.sigmoid(p.U_f @ h_k + p.W_f @ x + p.bU_f + p.b_f) * c_k
    return ct.sigmoid(o) * ct.tanh(c), c
