"""Plain PyTorch reference modules for the new zoo models (recursion / loops, no batching).

Their state_dict names are what the models' `aliases` map.  Import only after
`pytest.importorskip("torch")`.
"""
from __future__ import annotations

import torch
from torch import nn

from cortex_tvm.data import dag_postorder


class TreeGRU(nn.Module):
    def __init__(self, V, H):
        super().__init__()
        self.H = H
        self.emb, self.W = nn.Embedding(V, H), nn.Linear(H, 2 * H)
        self.U, self.Uh = nn.Linear(2 * H, 3 * H), nn.Linear(2 * H, H)

    def node(self, n):
        H = self.H
        if n.is_leaf:
            z, u = self.W(self.emb.weight[n.word]).split(H)
            return (1 - torch.sigmoid(z)) * torch.tanh(u)
        hl, hr = (self.node(c) for c in n.children)
        z, rl, rr = torch.sigmoid(self.U(torch.cat([hl, hr]))).split(H)
        u = torch.tanh(self.Uh(torch.cat([rl * hl, rr * hr])))
        return z * (hl + hr) + (1 - z) * u

    def forward(self, trees):
        return torch.stack([self.node(t) for t in trees])


class ChildSumTreeLSTM(nn.Module):
    """The common child-sum module (ioux, iouh, fx, fh); x = emb[word] at every node with a word, else 0."""

    def __init__(self, V, H):
        super().__init__()
        self.H = H
        self.emb = nn.Embedding(V, H)
        self.ioux, self.iouh = nn.Linear(H, 3 * H), nn.Linear(H, 3 * H)
        self.fx, self.fh = nn.Linear(H, H), nn.Linear(H, H)

    def node(self, n):
        H = self.H
        if n.is_leaf:
            x = self.emb.weight[n.word]
            child_h = child_c = torch.zeros(1, H)
        else:
            x = self.emb.weight[n.word] if n.word is not None else torch.zeros(self.emb.weight.shape[1])
            states = [self.node(c) for c in n.children]
            child_h = torch.stack([s[0] for s in states])
            child_c = torch.stack([s[1] for s in states])
        i, o, u = (self.ioux(x) + self.iouh(child_h.sum(0))).split(H)
        f = torch.sigmoid(self.fh(child_h) + self.fx(x))
        c = torch.sigmoid(i) * torch.tanh(u) + (f * child_c).sum(0)
        return torch.sigmoid(o) * torch.tanh(c), c

    def forward(self, trees):
        return torch.stack([self.node(t)[0] for t in trees])


class MVRNN(nn.Module):
    def __init__(self, V, H):
        super().__init__()
        self.emb = nn.Embedding(V, H)
        self.embM = nn.Parameter(torch.eye(H).repeat(V, 1, 1) + 0.1 * torch.randn(V, H, H))
        self.W, self.WM = nn.Linear(2 * H, H), nn.Linear(2 * H, H, bias=False)

    def node(self, n):
        if n.is_leaf:
            return self.emb.weight[n.word], self.embM[n.word]
        (a, A), (b, B) = (self.node(c) for c in n.children)
        p = torch.tanh(self.W(torch.cat([B @ a, A @ b])))
        P = self.WM.weight @ torch.cat([A, B], 0)
        return p, P

    def forward(self, trees):
        return torch.stack([self.node(t)[0] for t in trees])


class DAGRNN(nn.Module):
    """Loops over each DAG's distinct nodes in topological order (a shared node once)."""

    def __init__(self, V, H):
        super().__init__()
        self.emb, self.Wx, self.U = nn.Embedding(V, H), nn.Linear(H, H), nn.Linear(H, H, bias=False)

    def forward(self, dags):
        out = []
        for dag in dags:
            h = {}
            for n in dag_postorder(dag):
                if n.is_leaf:
                    h[id(n)] = torch.tanh(self.Wx(self.emb.weight[n.word]))
                else:
                    total = torch.stack([h[id(p)] for p in n.children]).sum(0)
                    x = self.emb.weight[n.word] if n.word is not None else torch.zeros(self.emb.weight.shape[1])
                    h[id(n)] = torch.tanh(self.Wx(x) + self.U(total))
            out.append(h[id(dag)])
        return torch.stack(out)


class SeqLSTM(nn.Module):
    def __init__(self, V, H):
        super().__init__()
        self.emb, self.lstm = nn.Embedding(V, H), nn.LSTM(H, H)

    def forward(self, word_lists):
        return torch.stack([self.lstm(self.emb(torch.tensor(ws))[:, None])[1][0][0, 0] for ws in word_lists])


class SeqGRU(nn.Module):
    def __init__(self, V, H):
        super().__init__()
        self.emb, self.gru = nn.Embedding(V, H), nn.GRU(H, H)

    def forward(self, word_lists):
        return torch.stack([self.gru(self.emb(torch.tensor(ws))[:, None])[1][0, 0] for ws in word_lists])


class TreeLSTM(nn.Module):
    """Binary TreeLSTM by recursion; an inner node with a word adds W x + bW to i, o, u
    (TreeLSTM(inner_words=True)); a missing child is zero state."""

    def __init__(self, V, H):
        super().__init__()
        self.H = H
        self.emb = nn.Embedding(V, H)
        self.W, self.U = nn.Linear(H, 3 * H), nn.Linear(2 * H, 5 * H)

    def node(self, n):
        H = self.H
        if n.is_leaf:
            i, o, u = self.W(self.emb.weight[n.word]).split(H)
            c = torch.sigmoid(i) * torch.tanh(u)
            return torch.sigmoid(o) * torch.tanh(c), c
        states = [self.node(k) for k in n.children] + [(torch.zeros(H), torch.zeros(H))] * (2 - len(n.children))
        (hl, cl), (hr, cr) = states
        i, fl, fr, o, u = self.U(torch.cat([hl, hr])).split(H)
        if n.word is not None:
            xi, xo, xu = self.W(self.emb.weight[n.word]).split(H)
            i, o, u = i + xi, o + xo, u + xu
        c = torch.sigmoid(i) * torch.tanh(u) + torch.sigmoid(fl) * cl + torch.sigmoid(fr) * cr
        return torch.sigmoid(o) * torch.tanh(c), c

    def forward(self, trees):
        return torch.stack([self.node(t)[0] for t in trees])
