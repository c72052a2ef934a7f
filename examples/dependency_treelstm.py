"""Dependency Tree-LSTM (Tai et al. 2015) on Universal Dependencies trees, compiled by cortex_tvm.

Every token of a CoNLL-U sentence is a node with its word; its dependents are
its children.  `ChildSumTreeLSTM` reads x = emb[word] at every node, so on
these trees it is the Dependency Tree-LSTM.  The compiled model is checked
against a plain numpy implementation of the equations and, when PyTorch is
importable, against a PyTorch module whose weights it loads.

    python examples/dependency_treelstm.py [--conllu path/to/treebank.conllu] [--hidden 32]

Without --conllu it runs on the small sample that ships with the package.
"""
from __future__ import annotations

import argparse
import os

os.environ.setdefault("TVM_NUM_THREADS", "2")

import numpy as np  # noqa: E402

import cortex_tvm as ct  # noqa: E402

TOLERANCE = 1e-4


def numpy_dependency_tree_lstm(trees, w):
    """Root h of each tree, float64, one node at a time in post-order (children before parents)."""
    w = {k: v.astype(np.float64) for k, v in w.items()}
    H = w["U_f"].shape[0]

    def sigmoid(z):
        return 1.0 / (1.0 + np.exp(-z))

    roots = []
    for tree in trees:
        h, c = {}, {}
        for node in ct.data.postorder(tree):
            x = w["emb"][node.word] if node.word is not None else np.zeros(w["emb"].shape[1])
            kids = node.children or []
            h_sum = sum((h[id(k)] for k in kids), np.zeros(H))
            iou = w["W_iou"] @ x + w["b_iou"] + w["U_iou"] @ h_sum + w["bU_iou"]
            i, o, u = sigmoid(iou[:H]), sigmoid(iou[H:2 * H]), np.tanh(iou[2 * H:])
            c[id(node)] = i * u + sum((sigmoid(w["W_f"] @ x + w["b_f"] + w["U_f"] @ h[id(k)] + w["bU_f"]) * c[id(k)]
                                       for k in kids), np.zeros(H))
            h[id(node)] = o * np.tanh(c[id(node)])
        roots.append(h[id(tree)])
    return np.stack(roots)


def torch_dependency_tree_lstm(vocab_size, hidden):
    """A PyTorch Dependency Tree-LSTM (the usual ioux/iouh/fx/fh module), or None without torch."""
    try:
        import torch
        from torch import nn
    except ImportError:
        return None

    class DependencyTreeLSTM(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(vocab_size, hidden)
            self.ioux, self.iouh = nn.Linear(hidden, 3 * hidden), nn.Linear(hidden, 3 * hidden)
            self.fx, self.fh = nn.Linear(hidden, hidden), nn.Linear(hidden, hidden)

        def forward(self, trees):
            out = []
            for tree in trees:
                h, c = {}, {}
                for node in ct.data.postorder(tree):
                    x = self.emb.weight[node.word] if node.word is not None else torch.zeros(hidden)
                    kids = node.children or []
                    child_h = torch.stack([h[id(k)] for k in kids]) if kids else torch.zeros(1, hidden)
                    child_c = torch.stack([c[id(k)] for k in kids]) if kids else torch.zeros(1, hidden)
                    i, o, u = (self.ioux(x) + self.iouh(child_h.sum(0))).chunk(3)
                    f = torch.sigmoid(self.fx(x) + self.fh(child_h))
                    c[id(node)] = torch.sigmoid(i) * torch.tanh(u) + (f * child_c).sum(0)
                    h[id(node)] = torch.sigmoid(o) * torch.tanh(c[id(node)])
                out.append(h[id(tree)])
            return torch.stack(out)

    torch.manual_seed(0)
    return DependencyTreeLSTM()


def run(conllu=None, hidden=32) -> dict:
    """Compile and run the model; returns the largest differences to the references."""
    trees, vocab = ct.data.load_conllu(conllu) if conllu else ct.data.conllu_sample()
    widest = max(len(n.children or ()) for t in trees for n in ct.data.postorder(t))
    model = ct.models.ChildSumTreeLSTM(hidden_size=hidden, vocab_size=len(vocab), max_children=max(widest, 1))
    module = torch_dependency_tree_lstm(len(vocab), hidden)
    if module is not None:
        model.load_weights(module.state_dict())        # ioux.weight -> W_iou, ... (the model's aliases)
    compiled = model.compile(target="llvm")
    roots = compiled(trees)
    diffs = {"numpy": float(np.abs(roots - numpy_dependency_tree_lstm(trees, model.weights)).max())}
    if module is not None:
        import torch
        with torch.no_grad():
            diffs["pytorch"] = float(np.abs(roots - module(trees).numpy()).max())
    print(f"{len(trees)} sentences, {sum(len(ct.data.postorder(t)) for t in trees)} words, "
          f"vocabulary {len(vocab)}, up to {widest} dependents per word; root h: {roots.shape}")
    for name, diff in diffs.items():
        print(f"max |cortex_tvm - {name}| = {diff:.2e}")
    if "pytorch" not in diffs:
        print("(PyTorch is not importable: compared with numpy only)")
    return diffs


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--conllu", help="a CoNLL-U file (default: the bundled sample)")
    parser.add_argument("--hidden", type=int, default=32)
    args = parser.parse_args(argv)
    diffs = run(args.conllu, args.hidden)
    if max(diffs.values()) > TOLERANCE:
        raise SystemExit(f"mismatch: {diffs}")


if __name__ == "__main__":
    main()
