"""A TreeLSTM written by recursion in float64 torch: the training tests' independent reference.

One node at a time, no levels, no slots, differentiated by torch.autograd.  Import only after
`pytest.importorskip("torch")`.
"""
import numpy as np
import torch


def to_bf16(t):
    """float64 -> float32 -> bfloat16 (nearest, ties to even) -> float64."""
    return t.to(torch.float32).to(torch.bfloat16).to(torch.float64)


class Bf16Product(torch.autograd.Function):
    """w @ x with both rounded to bfloat16, summed in float64; the pullback rounds the incoming
    gradient too (dw = bf16(dy) x bf16(x), dx = bf16(w)^T bf16(dy)): each product of the training
    step taken on bfloat16 inputs, as `compile(training=True, precision="bf16")` takes them."""

    @staticmethod
    def forward(ctx, w, x):
        ctx.save_for_backward(w, x)
        return to_bf16(w) @ to_bf16(x)

    @staticmethod
    def backward(ctx, dy):
        w, x = ctx.saved_tensors
        dy = to_bf16(dy)
        return torch.outer(dy, to_bf16(x)), to_bf16(w).T @ dy


class EagerTreeLSTM(torch.nn.Module):
    """TreeLSTM (DESIGN.md's equations) by recursion; all_h lists every node's h in postorder.
    bf16=True: the weights' products on bfloat16 inputs (`Bf16Product`), a word's leaf computed
    once a batch and shared by every leaf of that word, as the compiled pass computes it
    (`distinct_leaves`): the pullback of its product then rounds the sum of their gradients."""

    def __init__(self, weights, bf16=False):
        super().__init__()
        for name, w in weights.items():
            self.register_parameter(name, torch.nn.Parameter(torch.tensor(w, dtype=torch.float64)))
        self.product = Bf16Product.apply if bf16 else torch.matmul
        self.leaves = {} if bf16 else None

    def node(self, n, all_h):
        if n.children is None and self.leaves is not None and n.word in self.leaves:
            h, c = self.leaves[n.word]
            all_h.append(h)
            return h, c
        if n.children is None:
            i, o, u = (self.product(self.W, self.emb[n.word]) + self.bW).chunk(3)
            c = torch.sigmoid(i) * torch.tanh(u)
        else:
            (hl, cl), (hr, cr) = (self.node(k, all_h) for k in n.children)
            i, fl, fr, o, u = (self.product(self.U, torch.cat([hl, hr])) + self.bU).chunk(5)
            c = torch.sigmoid(i) * torch.tanh(u) + torch.sigmoid(fl) * cl + torch.sigmoid(fr) * cr
        h = torch.sigmoid(o) * torch.tanh(c)
        if n.children is None and self.leaves is not None:
            self.leaves[n.word] = (h, c)
        all_h.append(h)
        return h, c

    def forward(self, trees):
        roots, per_tree = [], []
        if self.leaves is not None:
            self.leaves = {}
        for t in trees:
            all_h = []
            roots.append(self.node(t, all_h)[0])
            per_tree.append(torch.stack(all_h))
        return torch.stack(roots), per_tree


def eager_grads(weights, loss_of, bf16=False) -> dict:
    """{weight name: gradient} of loss_of(an `EagerTreeLSTM` of `weights`) through torch.autograd."""
    eager = EagerTreeLSTM(weights, bf16=bf16)
    loss_of(eager).backward()
    return {name: p.grad.numpy() for name, p in eager.named_parameters()}


def weight_difference(got, want) -> float:
    """The largest of max |got - want| / max |want| over the weights."""
    assert sorted(got) == sorted(want)
    return max(float(np.abs(got[k] - want[k]).max() / np.abs(want[k]).max()) for k in want)


def pullbacks(compiled_models, trees, hidden, all_nodes, seed=3):
    """([each compiled model's vjp gradients], loss_of): one random adjoint on the roots' h (B, hidden), or
    with all_nodes on every node's, pulled back by each model, and loss_of(an `EagerTreeLSTM`) the loss
    sum(adjoint * h) whose autograd gradients they should equal."""
    rng = np.random.default_rng(seed)
    runs = [compiled.vjp(trees, all_nodes=all_nodes) for compiled in compiled_models]
    if all_nodes:
        directions = [rng.standard_normal(o.shape) for o in runs[0][0]]
        grads = [vjp([d.astype(np.float32) for d in directions]) for _, vjp in runs]

        def loss_of(m):
            return sum((h * torch.tensor(d)).sum() for h, d in zip(m(trees)[1], directions))
    else:
        direction = rng.standard_normal((len(trees), hidden))
        grads = [vjp(direction.astype(np.float32)) for _, vjp in runs]

        def loss_of(m):
            return (m(trees)[0] * torch.tensor(direction)).sum()
    return grads, loss_of
