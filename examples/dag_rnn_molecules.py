"""DAG-RNN over molecules with per-atom features (UG-RNN style), compiled by cortex_tvm.

A molecule is a graph of atoms and bonds.  To read it from one atom (the sink), every bond
is pointed at the sink: an atom's predecessors are its neighbours one bond farther away (a
bond between two atoms at the same distance, inside a ring, is left out).  In a ring the
atom opposite the sink is a predecessor of two atoms, so the structure is a DAG, and
`DAGRNN` computes a shared atom once:

    h_atom = tanh(Wx x_atom + U sum_{p in preds(atom)} h_p + b)

x_atom is the atom's feature vector (element one-hot, degree one-hot, aromatic flag, a
partial charge), given with each batch: `DAGRNN(inputs="features")`, called as
`compiled(sinks, features=X)` with X's rows in `ct.data.dag_postorder` order.  The result is
checked against a float64 numpy implementation of the equation, one atom at a time.

    python examples/dag_rnn_molecules.py [--molecules 64] [--hidden 64] [--batch 16]
"""
from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("TVM_NUM_THREADS", "2")

import numpy as np  # noqa: E402

import cortex_tvm as ct  # noqa: E402

ELEMENTS = ("C", "N", "O", "S", "Cl")
#: features per atom: element one-hot, degree one-hot (1-4), aromatic, partial charge
FEATURES = len(ELEMENTS) + 4 + 2
MAX_DEGREE = 4
TOLERANCE = 1e-4


def random_molecule(rng) -> tuple:
    """(elements, bonds, aromatic) of a small organic-looking molecule: one or two six-rings with
    side chains; every atom has at most MAX_DEGREE bonds."""
    bonds, elements, aromatic = [], [], []

    def atom(element, ring=False):
        elements.append(element)
        aromatic.append(ring)
        return len(elements) - 1

    degree = lambda a: sum(a in b for b in bonds)                          # noqa: E731
    for r in range(1 + int(rng.random() < 0.4)):
        ring = [atom("N" if rng.random() < 0.15 else "C", ring=True) for _ in range(6)]
        bonds += [(ring[k], ring[(k + 1) % 6]) for k in range(6)]
        if r:                                                             # a biphenyl-like link
            bonds.append((ring[0], int(rng.integers(0, 6))))
    for _ in range(int(rng.integers(1, 6))):                               # side chains
        anchor = int(rng.integers(0, len(elements)))
        for _ in range(int(rng.integers(1, 4))):
            if degree(anchor) >= MAX_DEGREE - 1:
                break
            new = atom(str(rng.choice(ELEMENTS, p=[0.6, 0.15, 0.15, 0.05, 0.05])))
            bonds.append((anchor, new))
            anchor = new
    return elements, bonds, aromatic


def atom_features(elements, bonds, aromatic, rng) -> np.ndarray:
    x = np.zeros((len(elements), FEATURES), np.float32)
    for a, element in enumerate(elements):
        x[a, ELEMENTS.index(element)] = 1.0
        x[a, len(ELEMENTS) + min(sum(a in b for b in bonds), 4) - 1] = 1.0
        x[a, -2] = float(aromatic[a])
        x[a, -1] = rng.normal(0.0, 0.3)
    return x


def sink_dag(num_atoms: int, bonds, sink: int) -> ct.data.Node:
    """The molecule read from `sink`: each atom's Node has the neighbours one bond farther away as
    its children (predecessors); `label` is the atom's index."""
    neighbours = [[] for _ in range(num_atoms)]
    for a, b in bonds:
        neighbours[a].append(b), neighbours[b].append(a)
    distance = np.full(num_atoms, -1)
    distance[sink], frontier = 0, [sink]
    while frontier:
        nxt = []
        for a in frontier:
            for b in neighbours[a]:
                if distance[b] < 0:
                    distance[b] = distance[a] + 1
                    nxt.append(b)
        frontier = nxt
    nodes = {}
    for a in sorted(range(num_atoms), key=lambda a: -distance[a]):          # farthest first
        preds = [nodes[b] for b in sorted(neighbours[a]) if distance[b] == distance[a] + 1]
        # the word is not read (the model takes features), but a leaf Node must carry one
        nodes[a] = ct.data.Node(word=0, children=preds or None, label=a)
    return nodes[sink]


def numpy_dag_rnn(sinks, features, w) -> np.ndarray:
    """The sink's h of each DAG, float64, one atom at a time (a shared atom once)."""
    w = {k: v.astype(np.float64) for k, v in w.items()}
    out, rows = [], iter(features.astype(np.float64))
    for sink in sinks:
        h = {}
        for node in ct.data.dag_postorder(sink):
            preds = sum((h[id(c)] for c in node.children or ()), np.zeros(w["U"].shape[0]))
            h[id(node)] = np.tanh(w["Wx"] @ next(rows) + w["U"] @ preds + w["b"])
        out.append(h[id(sink)])
    return np.stack(out)


def make_batch(molecules, rng):
    """(sinks, X): one DAG per molecule read from a random atom, X in dag_postorder order."""
    sinks, rows = [], []
    for elements, bonds, aromatic in molecules:
        x = atom_features(elements, bonds, aromatic, rng)
        sink = sink_dag(len(elements), bonds, int(rng.integers(0, len(elements))))
        sinks.append(sink)
        rows.append(x[[node.label for node in ct.data.dag_postorder(sink)]])
    return sinks, np.concatenate(rows)


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--molecules", type=int, default=64)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--batch", type=int, default=16)
    args = ap.parse_args(argv)
    rng = np.random.default_rng(0)
    molecules = [random_molecule(rng) for _ in range(args.molecules)]
    model = ct.models.DAGRNN(args.hidden, inputs="features", embed_size=FEATURES, max_predecessors=MAX_DEGREE)
    start = time.perf_counter()
    compiled = model.compile()
    print(f"DAGRNN H={args.hidden}, {FEATURES} features per atom: compiled in {time.perf_counter() - start:.1f} s")
    worst, times, shared = 0.0, [], 0
    for k in range(0, len(molecules), args.batch):
        sinks, X = make_batch(molecules[k:k + args.batch], rng)
        shared += sum(len(ct.data.dag_postorder(s)) < sum(1 for _ in _paths(s)) for s in sinks)
        out = compiled(sinks, features=X)
        ref = numpy_dag_rnn(sinks, X, model.weights)
        worst = max(worst, float(np.max(np.abs(out - ref))))
        start = time.perf_counter()
        compiled(sinks, features=X)
        times.append(time.perf_counter() - start)
    print(f"{args.molecules} molecules in batches of {args.batch} ({shared} DAGs share an atom): "
          f"{1e3 * np.mean(times):.3f} ms per batch, max |difference| vs float64 numpy {worst:.1e}")
    if worst > TOLERANCE:
        raise SystemExit(f"the compiled DAG-RNN differs from the numpy reference by {worst:.2e}")
    return {"max_abs_err": worst, "shared": shared}


def _paths(node):
    """Every node reached by walking each child edge (a shared atom once per path to it)."""
    stack = [node]
    while stack:
        n = stack.pop()
        yield n
        stack.extend(n.children or ())


if __name__ == "__main__":
    main()
