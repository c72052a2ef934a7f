"""Train a TreeLSTM sentiment classifier on SST with cortex_tvm's compiled forward and generated backward.

Tai et al. (2015) and DGL's TreeLSTM example: a linear classifier on every node's h, cross-entropy
at every node's label (5 classes), x = 300, h = 150, and DGL's Adagrad: lr 0.05 and weight decay
1e-4 for the cell and the classifier, lr 0.005 and no decay for the word embedding.  The encoder is
`TreeLSTM.compile(training=True).as_torch(sparse=True)`: its weights are torch parameters, the
forward compiled (the backward's own level pass, or the model's kernel where the levels are too small
for the cores), the backward generated from the RA program, and the
embedding's gradient holds the batch's words' rows only (a sparse tensor, as
`nn.Embedding(sparse=True)` makes), so Adagrad updates those rows and not the whole table.
The optimizer is `ct.optim.Adagrad`, torch.optim.Adagrad's update as one compiled pass per weight
(`--torch-optimizer`: torch's own, the same numbers; its step takes a few times as long).
`--precision bf16` (a CPU with AVX512_BF16): the forward's and the backward's products of the
weights with node values take bfloat16 inputs, summed in float32, as PyTorch's bf16 autocast
rounds a matmul's inputs; weights, gradients and the optimizer stay float32 (docs/training.md).

    python examples/train_sst.py                       # the bundled SST dev trees, split 80/20
    python examples/train_sst.py --trees train.txt --test dev.txt --epochs 5
    python examples/train_sst.py --precision bf16      # bfloat16 products (AVX512_BF16)
    CORTEX_TVM_CACHE_DIR=~/.cache/cortex_tvm python examples/train_sst.py   # later runs load the model's build

Prints how many vectors of h the training forward keeps per node for the backward, then each
epoch's mean loss, the training time per tree, node and root accuracy on the held-out trees and
the process's peak resident memory so far; a progress bar on stderr while an epoch runs.
"""
from __future__ import annotations

import argparse
import os
import resource
import sys
import time

os.environ.setdefault("TVM_NUM_THREADS", "2")
# PyTorch's OpenMP threads spin for milliseconds after each of its parallel ops (a dense optimizer's
# pass over the embedding table among them, --dense-embedding), on the cores the compiled model's threads need next:
# set before torch loads its OpenMP runtime, waiting threads sleep instead (on a 2-core Zen 4 an
# epoch of the one-group recipe took 0.60 ms per tree with it, 1.05 without).  To compare, delete this line.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numpy as np  # noqa: E402
import torch  # noqa: E402

import cortex_tvm as ct  # noqa: E402

CLASSES = 5
# Adagrad builds sparse tensors of the rows it updates; say that their invariant checks stay off
# (torch's default) instead of having torch warn that they are off
torch.sparse.check_sparse_tensor_invariants.disable()


def node_labels(trees) -> torch.Tensor:
    """Every node's label, trees in order, each in postorder (the order of all_nodes=True)."""
    return torch.tensor([n.label for t in trees for n in ct.data.postorder(t)], dtype=torch.long)


def make_encoder(vocab_size, hidden, embed, seed, sparse=True, precision="fp32"):
    model = ct.models.TreeLSTM(hidden_size=hidden, vocab_size=vocab_size, embed_size=embed, seed=seed)
    return model, model.compile(training=True, precision=precision).as_torch(sparse=sparse)


def make_optimizer(encoder, classifier, lr, weight_decay, adagrad=None):
    """DGL's TreeLSTM recipe: the embedding in a group of its own, a tenth of the rate, no decay
    (which Adagrad cannot apply to a sparse gradient); adagrad: the class (ct.optim.Adagrad)."""
    rest = [p for name, p in encoder.named_parameters() if name != "emb"] + list(classifier.parameters())
    return (adagrad or ct.optim.Adagrad)([{"params": rest, "weight_decay": weight_decay},
                                          {"params": [encoder.emb], "lr": 0.1 * lr}], lr=lr)


def step(encoder, classifier, optimizer, trees) -> float:
    """One Adagrad step on `trees`, the loss at every node; returns the loss."""
    optimizer.zero_grad()
    states = torch.cat(encoder(trees, all_nodes=True))
    loss = torch.nn.functional.cross_entropy(classifier(states), node_labels(trees))
    loss.backward()
    optimizer.step()
    return loss.item()


def accuracy(encoder, classifier, trees) -> tuple:
    """(node accuracy, root accuracy) on `trees`."""
    with torch.no_grad():
        per_tree = encoder(trees, all_nodes=True)
        predicted = classifier(torch.cat(per_tree)).argmax(1)
    labels = node_labels(trees)
    last = np.cumsum([len(s) for s in per_tree]) - 1               # a root is last in its postorder
    roots = torch.tensor([t.label for t in trees])
    return float((predicted == labels).float().mean()), float((predicted[last] == roots).float().mean())


def progress(done, total, loss, width=30):
    filled = width * done // total
    print(f"\r  [{'#' * filled}{'.' * (width - filled)}] {done}/{total} batches, loss {loss:.4f}",
          end="", file=sys.stderr, flush=True)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trees", default=None,
                        help="a PTB-bracket treebank to train on (default: the bundled SST dev trees)")
    parser.add_argument("--test", default=None, help="a treebank to evaluate on (default: the last 20%% of --trees)")
    parser.add_argument("--hidden", type=int, default=150, help="h (default: %(default)s)")
    parser.add_argument("--embed", type=int, default=300, help="x, the embedding size (default: %(default)s)")
    parser.add_argument("--batch", type=int, default=25, help="trees per step (default: %(default)s)")
    parser.add_argument("--epochs", type=int, default=3, help="(default: %(default)s)")
    parser.add_argument("--lr", type=float, default=0.05, help="Adagrad learning rate (default: %(default)s)")
    parser.add_argument("--weight-decay", type=float, default=1e-4, help="(default: %(default)s)")
    parser.add_argument("--dense-embedding", action="store_true",
                        help="the embedding's gradient as the whole table (the same steps, slower)")
    parser.add_argument("--torch-optimizer", action="store_true",
                        help="torch.optim.Adagrad instead of ct.optim.Adagrad (the same update, slower)")
    parser.add_argument("--precision", choices=("fp32", "bf16"), default="fp32",
                        help="bf16: the weights' products on bfloat16 inputs, summed in float32 (a CPU with "
                             "AVX512_BF16; default: %(default)s)")
    parser.add_argument("--max-trees", type=int, default=None, help="use only the first N training trees")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    if args.trees:
        train, vocab = ct.data.load_ptb(args.trees)
    else:
        train, vocab = ct.data.sst_sample()
    if args.test:
        test, vocab = ct.data.load_ptb(args.test, vocab)
    else:
        cut = len(train) * 4 // 5
        train, test = train[:cut], train[cut:]
    train = train[:args.max_trees] if args.max_trees else train
    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    start = time.perf_counter()
    try:
        model, encoder = make_encoder(len(vocab), args.hidden, args.embed, args.seed, not args.dense_embedding,
                                      args.precision)
    except ValueError as err:           # (bf16 on a CPU without AVX512_BF16: the message says so)
        parser.error(f"--precision {args.precision}: {err}")
    keep = "" if os.environ.get("CORTEX_TVM_CACHE_DIR") else " (CORTEX_TVM_CACHE_DIR=<a folder> keeps the build)"
    print(f"TreeLSTM h={args.hidden} x={args.embed} ({args.precision}), {len(vocab)} words: compiled with its "
          f"backward in {time.perf_counter() - start:.1f} s{keep}; {len(train)} training trees, {len(test)} test trees")
    level_pass = encoder.compiled.adjoint.level_pass
    if level_pass is not None:
        print(f"the training forward keeps {level_pass.saved_vectors('internal')} vectors of h per internal node "
              f"and {level_pass.saved_vectors('leaf')} per leaf for the backward")
    classifier = torch.nn.Linear(args.hidden, CLASSES)
    optimizer = make_optimizer(encoder, classifier, args.lr, args.weight_decay,
                               torch.optim.Adagrad if args.torch_optimizer else None)
    for epoch in range(1, args.epochs + 1):
        order = rng.permutation(len(train))
        batches = [[train[i] for i in order[k:k + args.batch]] for k in range(0, len(train), args.batch)]
        losses, start = [], time.perf_counter()
        for b, trees in enumerate(batches, 1):
            losses.append(step(encoder, classifier, optimizer, trees))
            progress(b, len(batches), float(np.mean(losses)))
        seconds = time.perf_counter() - start
        print(file=sys.stderr)
        nodes, roots = accuracy(encoder, classifier, test)
        print(f"epoch {epoch}: loss {np.mean(losses):.4f}, {1e3 * seconds / len(train):.2f} ms per training tree "
              f"({len(train) / seconds:.0f} trees/s); test accuracy: nodes {nodes:.3f}, roots {roots:.3f}; "
              f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
