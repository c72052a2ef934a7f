"""numpy building blocks of the models' level-batched executors (`Model.numpy_forward`): the
cells they share, apart from the model contract (`base.py`)."""
from __future__ import annotations

import numpy as np


def zero_states(lin, size: int, count: int) -> list:
    """`count` per-slot state arrays (num_slots, size) of zeros, for the numpy executors (slot 0
    is the null node a missing child reads)."""
    return [np.zeros((lin.num_slots, size), np.float32) for _ in range(count)]


def sigmoid(x):
    """numpy logistic function, for the models' level-batched executors."""
    return 1.0 / (1.0 + np.exp(-x))


def lstm_cell(i, o, u, forget=None, cells=None):
    """One LSTM cell update from gate pre-activations, for the numpy executors; returns (h, c).

    c = s(i) tanh(u) + sum_k s(f_k) c_k;  h = s(o) tanh(c).  `forget` and `cells`, both
    (..., K, H) with child k on axis -2, are the children's forget-gate pre-activations and
    cells; None (a leaf, a sequence's first element) leaves c = s(i) tanh(u).  The children
    are added one after another, left to right, as the RA programs of TreeLSTM and SeqLSTM
    write them.
    """
    c = sigmoid(i) * np.tanh(u)
    if forget is not None:
        for k in range(forget.shape[-2]):
            c = c + sigmoid(forget[..., k, :]) * cells[..., k, :]
    return sigmoid(o) * np.tanh(c), c
