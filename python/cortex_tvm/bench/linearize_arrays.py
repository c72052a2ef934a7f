"""Laying out a forest given as arrays: through Node objects vs in numpy alone.

    python -m cortex_tvm.bench.linearize_arrays [--trees 10000] [--repeat 3]

The bundled SST dev trees, cycled to --trees trees, are converted once to one
forest of parent and word arrays (each tree in post-order, trees one after
another).  Then, best of --repeat each:

(a) ``data.from_parents`` builds the Node objects and ``linearize`` lays them
    out (max_children=2, the binary models' layout), and
(b) ``linearize_parents`` lays out the arrays directly (no Node objects).

Both results are checked to be the same layout before anything is timed.
Prints both times and (a) / (b).  Single-threaded numpy and Python: keep the
machine otherwise quiet for figures worth quoting.
"""
from __future__ import annotations

import argparse
import time

import numpy as np

from .. import data
from ..linearize import linearize
from ..linearize_arrays import linearize_parents

#: the arrays both layouts must agree on (node_slots follows each one's own node order)
SAME = ("level_offsets", "children", "num_children", "words", "roots", "tree_sizes")


def sst_forest(count: int):
    """The SST dev trees cycled to `count` trees, as one (parents, words) forest."""
    trees, vocab = data.sst_sample()
    parents, words, base = [], [], 0
    per_tree = []
    for tree in trees:
        nodes = data.postorder(tree)
        index = {id(n): i for i, n in enumerate(nodes)}
        tree_parents = [-1] * len(nodes)
        for n in nodes:
            for c in n.children or []:
                tree_parents[index[id(c)]] = index[id(n)]
        per_tree.append((np.array(tree_parents), np.array([-1 if n.word is None else n.word for n in nodes])))
    for k in range(count):
        tree_parents, tree_words = per_tree[k % len(per_tree)]
        parents.append(np.where(tree_parents >= 0, tree_parents + base, -1))
        words.append(tree_words)
        base += len(tree_parents)
    return np.concatenate(parents), np.concatenate(words), len(vocab)


def _best(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trees", type=int, default=10000, help="trees in the forest (default 10000)")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each, the best is reported (default 3)")
    args = parser.parse_args(argv)
    parents, words, vocab_size = sst_forest(args.trees)

    def through_nodes():
        return linearize(data.from_parents(parents, words), 2, vocab_size=vocab_size)

    def from_arrays():
        return linearize_parents(parents, words, 2, vocab_size=vocab_size)

    a, b = through_nodes(), from_arrays()
    for name in SAME + ("node_slots",):      # post-order input: node orders agree as well
        if not np.array_equal(getattr(a, name), getattr(b, name)):
            raise SystemExit(f"the two layouts differ in {name}")
    nodes = _best(through_nodes, args.repeat)
    arrays = _best(from_arrays, args.repeat)
    print(f"{args.trees} SST trees, {len(parents)} nodes, {a.num_levels} levels; best of {args.repeat}")
    print(f"(a) from_parents + linearize : {nodes * 1e3:9.1f} ms")
    print(f"(b) linearize_parents        : {arrays * 1e3:9.1f} ms")
    print(f"(a) / (b)                    : {nodes / arrays:9.1f}x")
    return {"trees": args.trees, "nodes": len(parents), "nodes_s": nodes, "arrays_s": arrays}


if __name__ == "__main__":
    main()
