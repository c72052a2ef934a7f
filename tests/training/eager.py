"""A TreeLSTM written by recursion in float64 torch: the training tests' independent reference.

One node at a time, no levels, no slots, differentiated by torch.autograd.  Import only after
`pytest.importorskip("torch")`.
"""
import torch


class EagerTreeLSTM(torch.nn.Module):
    """TreeLSTM (DESIGN.md's equations) by recursion; all_h lists every node's h in postorder."""

    def __init__(self, weights):
        super().__init__()
        for name, w in weights.items():
            self.register_parameter(name, torch.nn.Parameter(torch.tensor(w, dtype=torch.float64)))

    def node(self, n, all_h):
        if n.children is None:
            i, o, u = (self.W @ self.emb[n.word] + self.bW).chunk(3)
            c = torch.sigmoid(i) * torch.tanh(u)
        else:
            (hl, cl), (hr, cr) = (self.node(k, all_h) for k in n.children)
            i, fl, fr, o, u = (self.U @ torch.cat([hl, hr]) + self.bU).chunk(5)
            c = torch.sigmoid(i) * torch.tanh(u) + torch.sigmoid(fl) * cl + torch.sigmoid(fr) * cr
        h = torch.sigmoid(o) * torch.tanh(c)
        all_h.append(h)
        return h, c

    def forward(self, trees):
        roots, per_tree = [], []
        for t in trees:
            all_h = []
            roots.append(self.node(t, all_h)[0])
            per_tree.append(torch.stack(all_h))
        return torch.stack(roots), per_tree
