"""Small GPU benchmark: cortex_tvm on CUDA (persistent kernel, per-level launches) vs PyTorch on CUDA
(eager recursion, and dynamic batching by tree height).  Self-contained; prints a table.

    python tests/gpu/bench_gpu.py [--hidden 256] [--batches 1,10] [--repeat 20]

Latency per batch of SST trees, end to end (linearization + copies + kernels + result copy back),
mean over a fixed set of batches, minimum over repeats.  TreeLSTM and TreeFC.
"""
from __future__ import annotations

import argparse
import time

import numpy as np


def _time(fn, batches, repeat):
    fn(batches[0])                          # warm-up (JIT, allocation)
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        for b in batches:
            fn(b)
        best = min(best, (time.perf_counter() - t) / len(batches))
    return best * 1e3


def _torch_models(name, weights, device):
    import torch
    w = {k: torch.tensor(np.asarray(v), device=device) for k, v in weights.items()}
    H = w["emb"].shape[1]

    def leaf(words):
        x = w["emb"][words]
        if name == "TreeFC":
            return x, None
        g = x @ w["W"].T + w["bW"]
        i, o, u = g[:, :H], g[:, H:2 * H], g[:, 2 * H:]
        c = torch.sigmoid(i) * torch.tanh(u)
        return torch.sigmoid(o) * torch.tanh(c), c

    def internal(hl, hr, cl, cr):
        if name == "TreeFC":
            return torch.tanh((hl + hr) @ w["W"].T + w["b"]), None
        g = torch.cat([hl, hr], 1) @ w["U"].T + w["bU"]
        i, fl, fr, o, u = (g[:, q * H:(q + 1) * H] for q in range(5))
        c = torch.sigmoid(i) * torch.tanh(u) + torch.sigmoid(fl) * cl + torch.sigmoid(fr) * cr
        return torch.sigmoid(o) * torch.tanh(c), c

    def eager(trees):
        def rec(n):
            if n.is_leaf:
                return leaf(torch.tensor([n.word], device=device))
            (hl, cl), (hr, cr) = rec(n.children[0]), rec(n.children[1])
            return internal(hl, hr, cl, cr)
        with torch.no_grad():
            out = torch.cat([rec(t)[0] for t in trees]).cpu().numpy()
        return out

    def batched(trees):
        # dynamic batching by height: all nodes of one height computed together
        nodes, height = [], {}
        stack = [(t, False) for t in trees]
        while stack:
            n, done = stack.pop()
            if done or n.is_leaf:
                height[id(n)] = 0 if n.is_leaf else 1 + max(height[id(c)] for c in n.children)
                nodes.append(n)
            else:
                stack.append((n, True))
                stack += [(c, False) for c in n.children]
        by_height = {}
        for n in nodes:
            by_height.setdefault(height[id(n)], []).append(n)
        with torch.no_grad():
            hs, cs, row = [], [], {}
            base = 0
            for hgt in sorted(by_height):
                level = by_height[hgt]
                if hgt == 0:
                    h, c = leaf(torch.tensor([n.word for n in level], device=device))
                else:
                    H_all = torch.cat(hs)
                    left = torch.tensor([row[id(n.children[0])] for n in level], device=device)
                    right = torch.tensor([row[id(n.children[1])] for n in level], device=device)
                    C_all = torch.cat(cs) if cs and cs[0] is not None else None
                    h, c = internal(H_all[left], H_all[right],
                                    None if C_all is None else C_all[left], None if C_all is None else C_all[right])
                for k, n in enumerate(level):
                    row[id(n)] = base + k
                base += len(level)
                hs.append(h)
                cs.append(c)
            H_all = torch.cat(hs)
            return H_all[torch.tensor([row[id(t)] for t in trees], device=device)].cpu().numpy()
    return eager, batched


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--batches", default="1,10")
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--num-batches", type=int, default=20)
    args = ap.parse_args()

    import tvm
    import cortex_tvm as ct
    from cortex_tvm import recipes
    if not tvm.cuda(0).exist:
        raise SystemExit("no CUDA device: nothing to benchmark")
    try:
        import torch
        has_torch = torch.cuda.is_available()
    except ImportError:
        has_torch = False
    trees, vocab = ct.data.sst_sample()
    binary = [t for t in trees if all(n.is_leaf or len(n.children) == 2 for n in ct.data.postorder(t))]
    rows = []
    for name in ("TreeFC", "TreeLSTM"):
        model = getattr(ct.models, name)(hidden_size=args.hidden, vocab_size=len(vocab))
        variants = {}
        for label, knobs in (("cortex persistent", dict(per_level=False, persistent=True)),
                             ("cortex per-level", dict(per_level=True, persistent=False))):
            r = recipes.shipped()[f"{name.lower()}_cuda"].with_knobs(**knobs)
            variants[label] = model.compile(target="cuda", schedule=r)
        weights = {k: np.array(v) for k, v in model.weights.items()}
        if has_torch:
            variants["torch eager"], variants["torch batched"] = _torch_models(name, weights, "cuda")
        for bs in (int(b) for b in args.batches.split(",")):
            batches = [binary[i * bs:(i + 1) * bs] for i in range(args.num_batches)]
            batches = [b for b in batches if len(b) == bs] or [binary[:bs]]
            ref = variants["cortex per-level"](batches[0])
            for label, fn in variants.items():
                err = float(np.abs(fn(batches[0]) - ref).max())
                rows.append((name, bs, label, _time(fn, batches, args.repeat), err))
    print(f"\nH={args.hidden}, SST trees, ms per batch (min over repeats of the mean over batches)")
    print(f"{'model':10s} {'batch':>5s}  {'system':18s} {'ms':>9s}  {'max |diff| vs per-level':>24s}")
    for name, bs, label, ms, err in rows:
        print(f"{name:10s} {bs:5d}  {label:18s} {ms:9.3f}  {err:24.2e}")
    if not has_torch:
        print("(PyTorch with CUDA not available: torch rows left out)")


if __name__ == "__main__":
    main()
