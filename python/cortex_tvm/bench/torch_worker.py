"""PyTorch / DGL baselines for `cortex-tvm bench`, one system per process.

Standalone on purpose: needs only numpy + torch (+ dgl for `dgl`), never
cortex_tvm, so it runs under any Python that has torch:

    python torch_worker.py --probe
    python torch_worker.py SYSTEM DATA.npz --roots ROOTS.npy --repeats 10 --threads 2
    python torch_worker.py SYSTEM DATA.npz --roots ROOTS.npy --train --grads GRADS.npy ...

SYSTEM is one of
  torch-eager   recursion per node, one small op chain per node (like the
                PyTorch reference TreeLSTM);
  torch-levels  dynamic batching by tree height: the batch is linearized by
                height on the host (vectorized numpy, timed), then one
                index_select + F.linear per level;
  dgl           one batched DGLGraph (built inside the timed region, edges
                child -> parent), dgl.prop_nodes_topo with message/reduce UDFs.

DATA.npz (written by cortex_tvm.bench.run): model ("treelstm"/"treefc"),
hidden, batch, weights w_* (y = W x + b convention), the trees of all batches
as flat post-order arrays word/left/right/height (left/right index the tree's
own nodes, -1 at leaves; word -1 at internal nodes) split by tree_offsets.
Writes the root h of every batch, (batches, B, H) float32 from the warm-up
pass, to ROOTS.npy for the orchestrator to check against its float64
reference, and prints one JSON line.

--train (torch-eager, torch-levels, dgl): one training step per batch is timed instead: the same forward
functions with the weights as tensors that require grad; per batch the grads are set to None, out =
fn(batch), (out * R).sum().backward() (R: the npz's d_roots, (B, H)), which fills every weight's .grad.
torch-levels writes its level states in place into preallocated tensors; autograd records those writes
(CopySlices) and index_select saves only its indices, so the same function trains.  Also writes the
gradient of the npz's grad_weight of every batch, (batches, *shape), to GRADS.npy.  With the npz's
`optimizer` (`make_optimizer`) each timed step (not the checked warm-up) ends in its step.
"""
import argparse
import gc
import json
import os
import sys
import time
import types
import warnings

import numpy as np


def import_dgl():
    """DGL 2.1.0 (the newest on PyPI for Linux) with current torch/setuptools needs two shims:
    dgl.utils imports setuptools.extern.packaging (gone in setuptools >= 71), and dgl.graphbolt
    ships C++ libraries only for old torch; graphbolt (sampling) is not used here, so an empty
    module stands in for it.  Returns (dgl, None) or (None, reason)."""
    try:
        try:
            import setuptools.extern.packaging  # noqa: F401
        except ImportError:
            import packaging
            import packaging.version  # noqa: F401
            shim = types.ModuleType("setuptools.extern")
            shim.packaging = packaging
            sys.modules["setuptools.extern"] = shim
            sys.modules["setuptools.extern.packaging"] = packaging
        sys.modules.setdefault("dgl.graphbolt", types.ModuleType("dgl.graphbolt"))
        import dgl
    except Exception as e:  # noqa: BLE001 -- any failure means "not available here"
        return None, "%s: %s" % (type(e).__name__, e)
    warnings.filterwarnings("ignore", message="The input graph for the user-defined edge function")
    return dgl, None


def probe():
    out = {"python": sys.version.split()[0], "numpy": np.__version__}
    try:
        import torch
        out["torch"] = torch.__version__
    except Exception as e:  # noqa: BLE001
        out["torch"] = None
        out["torch_error"] = "%s: %s" % (type(e).__name__, e)
        return out
    dgl, err = import_dgl()
    out.update(dgl=dgl.__version__ if dgl is not None else None, **({"dgl_error": err} if err else {}))
    return out


class FlatTree:
    """One tree as post-order arrays (numpy for vectorized prep, lists for recursion)."""

    __slots__ = ("word", "left", "right", "height", "wl", "ll", "rl", "n")

    def __init__(self, word, left, right, height):
        self.word, self.left, self.right, self.height = word, left, right, height
        self.wl, self.ll, self.rl = word.tolist(), left.tolist(), right.tolist()
        self.n = len(word)


def load(path):
    d = np.load(path)
    off = d["tree_offsets"]
    trees = [FlatTree(*(d[k][off[i]:off[i + 1]] for k in ("word", "left", "right", "height")))
             for i in range(len(off) - 1)]
    size = int(d["batch"])
    batches = [trees[k:k + size] for k in range(0, len(trees), size)]
    weights = {k[2:]: d[k] for k in d.files if k.startswith("w_")}
    return str(d["model"]), int(d["hidden"]), weights, batches


def make_system(system, model, H, w, sparse=False):
    """fn(batch of FlatTree) -> (B, H) root h, everything from the trees on inside.  sparse: the
    embedding's rows are read through F.embedding(sparse=True) (nn.Embedding(sparse=True)'s
    lookup), so its gradient is a sparse tensor of the batch's rows."""
    import torch
    import torch.nn.functional as F

    emb = w["emb"]

    def rows(words):
        """emb's rows of the word ids `words` (a LongTensor)."""
        return F.embedding(words, emb, sparse=True) if sparse else emb.index_select(0, words)

    def row(word):                      # (one word's)
        return rows(torch.tensor([word]))[0] if sparse else emb[word]
    lstm = model == "treelstm"
    if lstm:
        W, bW, U, bU = w["W"], w["bW"], w["U"], w["bU"]
    else:
        W, b = w["W"], w["b"]
    sig, tanh = torch.sigmoid, torch.tanh

    if system == "torch-eager":
        if lstm:
            def node(t, n):
                if t.ll[n] < 0:
                    i, o, u = F.linear(row(t.wl[n]), W, bW).chunk(3)
                    c = sig(i) * tanh(u)
                    return sig(o) * tanh(c), c
                hl, cl = node(t, t.ll[n])
                hr, cr = node(t, t.rl[n])
                i, fl, fr, o, u = F.linear(torch.cat((hl, hr)), U, bU).chunk(5)
                c = sig(i) * tanh(u) + sig(fl) * cl + sig(fr) * cr
                return sig(o) * tanh(c), c

            return lambda trees: torch.stack([node(t, t.n - 1)[0] for t in trees])

        def node_fc(t, n):
            if t.ll[n] < 0:
                return row(t.wl[n])
            return tanh(F.linear(node_fc(t, t.ll[n]) + node_fc(t, t.rl[n]), W, b))

        return lambda trees: torch.stack([node_fc(t, t.n - 1) for t in trees])

    if system == "torch-levels":
        def plan(trees):
            """Slots in height order (leaves first); per level its slot range and child slots."""
            sizes = np.fromiter((t.n for t in trees), np.int64, len(trees))
            base = np.zeros(len(trees), np.int64)
            np.cumsum(sizes[:-1], out=base[1:])
            offset = np.repeat(base, sizes)
            height = np.concatenate([t.height for t in trees])
            word = np.concatenate([t.word for t in trees])
            kids = np.stack([np.concatenate([t.left for t in trees]),
                             np.concatenate([t.right for t in trees])], 1) + offset[:, None]
            order = np.argsort(height, kind="stable")            # node index of each slot
            slot = np.empty_like(order)
            slot[order] = np.arange(len(order))
            bounds = np.concatenate(([0], np.cumsum(np.bincount(height))))
            nleaf = int(bounds[1])
            lr = torch.from_numpy(slot[kids[order[nleaf:]]].reshape(-1))   # (l, r) per internal slot
            levels = [(int(s), int(e), lr[2 * (s - nleaf):2 * (e - nleaf)]) for s, e in zip(bounds[1:-1], bounds[2:])]
            return (len(order), torch.from_numpy(word[order[:nleaf]]), levels,
                    torch.from_numpy(slot[base + sizes - 1]))

        if lstm:
            def run(trees):
                N, words, levels, roots = plan(trees)
                h, c = torch.empty(N, H), torch.empty(N, H)
                i, o, u = F.linear(rows(words), W, bW).chunk(3, 1)
                nl = len(words)
                c[:nl] = sig(i) * tanh(u)
                h[:nl] = sig(o) * tanh(c[:nl])
                for s, e, lr in levels:
                    cc = c.index_select(0, lr).view(e - s, 2, H)
                    i, fl, fr, o, u = F.linear(h.index_select(0, lr).view(e - s, 2 * H), U, bU).chunk(5, 1)
                    cn = sig(i) * tanh(u) + sig(fl) * cc[:, 0] + sig(fr) * cc[:, 1]
                    c[s:e] = cn
                    h[s:e] = sig(o) * tanh(cn)
                return h.index_select(0, roots)
            return run

        def run_fc(trees):
            N, words, levels, roots = plan(trees)
            h = torch.empty(N, H)
            h[:len(words)] = rows(words)
            for s, e, lr in levels:
                h[s:e] = tanh(F.linear(h.index_select(0, lr).view(e - s, 2, H).sum(1), W, b))
            return h.index_select(0, roots)
        return run_fc

    if system == "dgl":
        dgl, err = import_dgl()
        if dgl is None:
            raise RuntimeError("dgl not importable: " + err)

        def graph(trees):
            sizes = np.fromiter((t.n for t in trees), np.int64, len(trees))
            base = np.zeros(len(trees), np.int64)
            np.cumsum(sizes[:-1], out=base[1:])
            offset = np.repeat(base, sizes)
            left = np.concatenate([t.left for t in trees])
            word = np.concatenate([t.word for t in trees])
            parents = np.flatnonzero(left >= 0)
            right = np.concatenate([t.right for t in trees])
            # edges child -> parent, (left, right) interleaved so the left edge has the lower id
            src = np.stack([left[parents], right[parents]], 1).reshape(-1) + np.repeat(offset[parents], 2)
            dst = np.repeat(parents, 2)
            g = dgl.graph((torch.from_numpy(src), torch.from_numpy(dst)), num_nodes=len(word))
            leaves = np.flatnonzero(left < 0)
            return g, torch.from_numpy(leaves), torch.from_numpy(word[leaves]), torch.from_numpy(base + sizes - 1)

        if lstm:
            def message(edges):
                return {"h": edges.src["h"], "c": edges.src["c"]}

            def reduce(nodes):
                hm, cm = nodes.mailbox["h"], nodes.mailbox["c"]
                i, fl, fr, o, u = F.linear(hm.reshape(len(hm), 2 * H), U, bU).chunk(5, 1)
                return {"iou": torch.cat((i, o, u), 1), "cf": sig(fl) * cm[:, 0] + sig(fr) * cm[:, 1]}

            def apply(nodes):
                i, o, u = nodes.data["iou"].chunk(3, 1)
                c = sig(i) * tanh(u) + nodes.data["cf"]
                return {"h": sig(o) * tanh(c), "c": c}

            def run(trees):
                g, leaves, words, roots = graph(trees)
                N = g.num_nodes()
                iou = torch.zeros(N, 3 * H)
                iou[leaves] = F.linear(rows(words), W, bW)    # leaves: gates preset
                g.ndata["iou"] = iou
                g.ndata["cf"] = torch.zeros(N, H)                             # leaves: no forget term
                g.ndata["h"] = torch.zeros(N, H)
                g.ndata["c"] = torch.zeros(N, H)
                dgl.prop_nodes_topo(g, message, reduce, apply_node_func=apply)
                return g.ndata["h"].index_select(0, roots)
            return run

        def message_fc(edges):
            return {"h": edges.src["h"]}

        def reduce_fc(nodes):
            return {"h": tanh(F.linear(nodes.mailbox["h"].sum(1), W, b))}

        def run_fc(trees):
            g, leaves, words, roots = graph(trees)
            h = torch.zeros(g.num_nodes(), H)
            h[leaves] = rows(words)
            g.ndata["h"] = h
            dgl.prop_nodes_topo(g, message_fc, reduce_fc)
            return g.ndata["h"].index_select(0, roots)
        return run_fc

    raise ValueError("unknown system %r" % system)


def best_time(fn, arg, repeats):
    gc.collect()
    gc.disable()
    try:
        best = float("inf")
        for _ in range(repeats):
            start = time.perf_counter()
            fn(arg)
            best = min(best, time.perf_counter() - start)
    finally:
        gc.enable()
    return best


def make_optimizer(parameters, spec, ours=None):
    """The optimizer of the case's spec (None: none): Adagrad over `parameters` (name -> tensor), the
    embedding tables (spec's tables) a group at table_lr without decay (which a sparse gradient needs);
    `cortex_tvm.bench.worker` makes its own here too.  ours: the Adagrad class our worker steps with
    where spec's ours is set (`cortex_tvm.optim.Adagrad`); else, and always here, torch's."""
    import torch

    if spec is None:
        return None
    if spec["kind"] != "adagrad":
        raise ValueError("optimizer %r: only adagrad" % spec["kind"])
    tables = [p for k, p in parameters.items() if k in spec["tables"]]
    rest = [p for k, p in parameters.items() if k not in spec["tables"]]
    groups = [{"params": rest, "lr": spec["lr"], "weight_decay": spec["weight_decay"]}]
    if tables:
        groups.append({"params": tables, "lr": spec["table_lr"]})
    return (ours if spec.get("ours") and ours is not None else torch.optim.Adagrad)(groups)


def train_steps(step, parameters, batches, weight, repeats, optimizer):
    """(roots, gradients of `weight`, per-batch best times, the largest change of `weight`) of
    `step(batch)` (forward, backward to every .grad), then `optimizer.step()` if one is given;
    the warm-up (every batch once, its results kept for the check) takes no optimizer step."""
    roots, grads = [], []
    for batch in batches:
        for p in parameters.values():
            p.grad = None
        roots.append(step(batch).detach().numpy().copy())
        missing = [k for k, p in parameters.items() if p.grad is None]
        if missing:
            raise RuntimeError("no gradient for %s" % missing)
        grads.append(parameters[weight].grad.to_dense().numpy().copy())
    before = parameters[weight].detach().clone()

    def timed(batch):
        for p in parameters.values():
            p.grad = None
        step(batch)
        if optimizer is not None:
            optimizer.step()
    times = [best_time(timed, batch, repeats) for batch in batches]
    moved = float((parameters[weight].detach() - before).abs().max())
    return np.stack(roots), np.stack(grads), times, moved


def read_optimizer(data):
    """The npz's optimizer spec (a dict), or None where the case has none."""
    return json.loads(str(data["optimizer"])) if "optimizer" in data.files else None


def train(system, model, H, weights, batches, direction, weight, repeats, spec):
    """`train_steps` of `system`'s training step."""
    import torch

    w = {k: torch.from_numpy(np.array(v, np.float32)).requires_grad_() for k, v in weights.items()}
    bf16 = system.endswith("-bf16")           # PyTorch's own: the step's products in bf16 under CPU autocast
    fn = make_system(system.removesuffix("-bf16"), model, H, w, sparse=bool(spec and spec.get("sparse")))
    direction = torch.from_numpy(np.array(direction, np.float32))

    def step(batch):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            out = fn(batch).float()          # (float32's own tensor where autocast is off)
        (out * direction).sum().backward()
        return out
    return train_steps(step, w, batches, weight, repeats, make_optimizer(w, spec))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("system", nargs="?", choices=["torch-eager", "torch-levels", "dgl", "torch-levels-bf16"])
    ap.add_argument("data", nargs="?")
    ap.add_argument("--roots", help="where to write every batch's root h (.npy)")
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--train", action="store_true",
                    help="time a training step (forward, backward and the npz's optimizer step) per batch")
    ap.add_argument("--grads", help="--train: where to write every batch's gradient of the npz's grad_weight (.npy)")
    ap.add_argument("--probe", action="store_true", help="print torch/dgl versions as JSON and exit")
    args = ap.parse_args(argv)
    if args.probe:
        print(json.dumps(probe()), flush=True)
        return 0
    if not args.system or not args.data or not args.roots:
        ap.error("SYSTEM, DATA and --roots are required")
    import torch

    torch.set_num_threads(args.threads)
    model, H, weights, batches = load(args.data)
    extra = {}
    if args.train:
        if not args.grads:
            ap.error("--train needs --grads")
        d = np.load(args.data)
        spec, weight = read_optimizer(d), str(d["grad_weight"])
        roots, grads, times, moved = train(args.system, model, H, weights, batches, d["d_roots"], weight,
                                           args.repeats, spec)
        np.save(args.grads, grads)
        extra = {"mode": "train", "grad_weight": weight, "optimizer": spec and spec["kind"], "weight_moved": moved}
    else:
        with torch.inference_mode():
            w = {k: torch.from_numpy(v) for k, v in weights.items()}
            if args.system.endswith("-bf16"):      # PyTorch's own bf16 path: oneDNN under CPU autocast
                fp32 = make_system(args.system.removesuffix("-bf16"), model, H, w)

                def fn(batch):
                    with torch.autocast("cpu", dtype=torch.bfloat16):
                        return fp32(batch).float()
            else:
                fn = make_system(args.system, model, H, w)
            roots = np.stack([fn(batch).numpy().copy() for batch in batches])      # also the warm-up
            times = [best_time(fn, batch, args.repeats) for batch in batches]
    np.save(args.roots, roots)
    result = {"system": args.system, "ms": float(np.mean(times)) * 1e3, "per_batch_ms": [t * 1e3 for t in times],
              **extra, "threads": torch.get_num_threads(), "torch": torch.__version__, "numpy": np.__version__}
    if args.system == "dgl":
        import dgl
        result["dgl"] = dgl.__version__
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
