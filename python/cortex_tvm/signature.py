"""The kernel's calling convention in one record: which arguments, in which order, of which shape.

Lowering produces it (`Lowered.signature`); the executor, export/load, the Relax embedding
and remote measurement all derive their argument lists from it instead of spelling the order
out again, and an exported model carries it as JSON so `load` rebuilds it exactly.

    sig = model.lower(specialize_leaves=False).signature
    [p.name for p in sig.params()]   # ['word', 'children', 'level_offsets', 'roots', 'max_level_size',
                                     #  'emb', 'W', 'b', 'h', 'out']
    args = sig.structure_args(lin)   # the leading arguments for a linearized batch
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import linearize as _linearize
from .linearize_arrays import linearize_parents
from .node_features import with_slot_rows


@dataclass(frozen=True)
class Param:
    """One kernel parameter: its name, role, shape (ints, or the names of the sizes that vary
    per call: "num_slots", "num_levels_plus_1", "batch") and dtype."""

    name: str
    #: node_input, node_features, children, num_children, level_offsets, roots, max_level_size,
    #: weight, state, out
    role: str
    shape: tuple
    dtype: str


@dataclass(frozen=True)
class KernelSignature:
    """Everything a caller of a lowered recursive kernel needs to know (see the module doc)."""

    #: per-node int32 inputs: (name, bound, marker of a node without one or None)
    node_inputs: tuple
    max_children: int
    uses_num_children: bool
    #: (name, shape, dtype) in parameter order
    weights: tuple
    #: recursive states (name, shape, dtype); the first is the output
    states: tuple
    #: "tree" or "dag" (a node with several parents computed once)
    kind: str = "tree"
    #: leaves have their own loop nest; the level loop starts at level 1
    specialized: bool = True
    #: the parameter transform function's parameters (name, shape, dtype, written) in call order:
    #: model weights in, packed weights and leaf tables out (`hoist`, `pack`); () without one
    transform: tuple = ()
    #: per-node float inputs given with each batch (name, size, dtype): at most one (`ra.node_features`)
    node_features: tuple = ()

    @classmethod
    def of(cls, program, weights, node_inputs, uses_num_children, specialized, node_features=()) -> "KernelSignature":
        """From a lowered RA program (see `lower.assemble`)."""
        return cls(tuple((i.name, int(i.bound), getattr(i, "missing", None)) for i in node_inputs),
                   int(program.spec.max_children), bool(uses_num_children),
                   tuple((w.name, tuple(int(d) for d in w.shape), str(w.dtype)) for w in weights),
                   tuple((s.name, tuple(int(d) for d in s.shape), str(s.dtype)) for s in program.states),
                   program.spec.kind, bool(specialized),
                   node_features=tuple((f.name, int(f.size), str(f.dtype)) for f in node_features))

    # -- the convention -------------------------------------------------------------------
    def params(self) -> list:
        """The parameters in call order."""
        out = [Param(name, "node_input", ("num_slots",), "int32") for name, _, _ in self.node_inputs]
        out += [Param(name, "node_features", ("num_slots", size), dtype) for name, size, dtype in self.node_features]
        out.append(Param("children", "children", ("num_slots", self.max_children), "int32"))
        if self.uses_num_children:
            out.append(Param("num_children", "num_children", ("num_slots",), "int32"))
        out += [Param("level_offsets", "level_offsets", ("num_levels_plus_1",), "int32"),
                Param("roots", "roots", ("batch",), "int32"), Param("max_level_size", "max_level_size", (), "int32")]
        out += [Param(name, "weight", shape, dtype) for name, shape, dtype in self.weights]
        out += [Param(name, "state", ("num_slots",) + shape, dtype) for name, shape, dtype in self.states]
        _, shape, dtype = self.states[0]
        return out + [Param("out", "out", ("batch",) + shape, dtype)]

    def model_weights(self) -> list:
        """(name, shape, dtype) of the weights a user gives, in the model's layout: the transform's
        inputs, then the kernel's weights that no transform produces."""
        out = [(n, s, d) for n, s, d, written in self.transform if not written]
        produced = {n for n, _, _, written in self.transform if written} | {n for n, _, _ in out}
        return out + [w for w in self.weights if w[0] not in produced]

    @property
    def first_level(self) -> int:
        """The first level the level loop computes (leaves are level 0)."""
        return 1 if self.specialized else 0

    @property
    def no_word(self):
        """What the words array holds at a node without a word, or None when words are read at
        leaves only."""
        return next((missing for _, _, missing in self.node_inputs if missing is not None), None)

    @property
    def reads_words(self) -> bool:
        """Whether the kernel reads word ids (a model fed `node_features` alone ignores them)."""
        return bool(self.node_inputs)

    def layout(self, trees, node_tile: int, batching: bool, vocab_bound, unroll=None,
               features=None) -> _linearize.Linearized:
        """Validate and lay out a batch the way this kernel expects (`unroll`: (depth, chunks) of a
        recursively unrolled kernel, see `unrolled_levels`); `features`: the batch's per-node
        feature rows, trees in batch order, each in post-order (`node_features.slot_rows`)."""
        self._check_features_given(features)
        # a kernel without word inputs reads no words: any node may carry one (no_word 0)
        no_word = self.no_word if self.reads_words else 0
        lin = _linearize.linearize(trees, self.max_children, pad=node_tile, vocab_size=vocab_bound,
                                   batching=batching, allow_shared=self.kind == "dag", no_word=no_word,
                                   unroll=unroll)
        return self._with_features(lin, features)

    def layout_parents(self, parents, words, node_tile: int, batching: bool, vocab_bound,
                       unroll=None, features=None, distinct_leaves=False) -> _linearize.Linearized:
        """`layout` for a forest given as arrays (`linearize_arrays.linearize_parents`: node i's
        parent, -1 at a root; node_slots in node order; `distinct_leaves` as its).  ValueError
        for a DAG kernel."""
        if self.kind == "dag":
            raise ValueError("parents=: a parent array describes a forest (one parent per node), but this "
                             "model computes DAGs (a node shared by several parents); pass its Nodes, e.g. "
                             "from ct.data.from_edges")
        self._check_features_given(features)
        no_word = self.no_word
        if not self.reads_words:
            no_word = 0
            if words is None:        # no words to give: every node is word 0, which nothing reads
                words = np.zeros(len(parents) if hasattr(parents, "__len__") else 0, np.int32)
        lin = linearize_parents(parents, words, self.max_children, pad=node_tile, vocab_size=vocab_bound,
                                batching=batching, no_word=no_word, unroll=unroll, distinct_leaves=distinct_leaves)
        return self._with_features(lin, features)

    def _check_features_given(self, features) -> None:
        if self.node_features and features is None:
            name, size, _ = self.node_features[0]
            raise ValueError(f"this model reads per-node features ({name!r}, {size} per node): pass "
                             f"features= a float32 array (nodes, {size}), rows in the nodes' order")
        if features is not None and not self.node_features:
            raise ValueError("features=: this model reads no per-node features (it reads word ids); "
                             "build it with inputs=\"features\" or ra.node_features")

    def _with_features(self, lin, features):
        if not self.node_features:
            return lin
        name, size, _ = self.node_features[0]
        return with_slot_rows(lin, features, name, size)

    def structure_args(self, lin: _linearize.Linearized, put=lambda a: a) -> list:
        """The leading arguments (node inputs .. max_level_size) for a linearized batch, each
        index array passed through `put` (e.g. a copy to a device)."""
        args = [put(lin.words) for _ in self.node_inputs]
        args += [put(lin.features) for _ in self.node_features]
        args.append(put(lin.children))
        if self.uses_num_children:
            args.append(put(lin.num_children))
        return args + [put(lin.level_offsets), put(lin.roots), int(lin.max_level_size)]

    # -- JSON (the export meta) -----------------------------------------------------------
    def to_json(self) -> dict:
        return {"node_inputs": [list(i) for i in self.node_inputs], "max_children": self.max_children,
                "uses_num_children": self.uses_num_children,
                "weights": [[n, list(s), d] for n, s, d in self.weights],
                "states": [[n, list(s), d] for n, s, d in self.states],
                "kind": self.kind, "specialized": self.specialized,
                "transform": [[n, list(s), d, w] for n, s, d, w in self.transform],
                "node_features": [[n, s, d] for n, s, d in self.node_features]}

    @classmethod
    def from_json(cls, data: dict) -> "KernelSignature":
        """ValueError naming what is missing or malformed."""
        try:
            return cls(tuple((str(n), int(b), None if m is None else int(m)) for n, b, m in data["node_inputs"]),
                       int(data["max_children"]), bool(data["uses_num_children"]),
                       tuple((str(n), tuple(int(x) for x in s), str(d)) for n, s, d in data["weights"]),
                       tuple((str(n), tuple(int(x) for x in s), str(d)) for n, s, d in data["states"]),
                       str(data["kind"]), bool(data["specialized"]),
                       tuple((str(n), tuple(int(x) for x in s), str(d), bool(w)) for n, s, d, w in data["transform"]),
                       tuple((str(n), int(s), str(d)) for n, s, d in data.get("node_features", ())))
        except (KeyError, TypeError, ValueError) as err:
            raise ValueError(f"kernel signature: malformed ({err!r})") from None
