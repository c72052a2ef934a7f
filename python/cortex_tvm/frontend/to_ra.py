"""A traced cell -> the RA program a hand-written model would build.

Each case (leaf, inner) becomes a few `ra.compute` stages.  Elementwise work
is inlined into the stage that needs it; a tensor gets a stage of its own
(is "materialized") only where the zoo models have one, so the recipes, the
tuner and the schedule primitives find the same structure:

  * every state: `leaf_<s>` / `internal_<s>` (states are named h, c, s2, s3, ...);
  * a product `W @ x [+ ...]` that is split with `ct.split(., G)`: one (G, m)
    stage `leaf_gates` / `gates` (row `g * m + i` of W), as TreeLSTM's gates;
  * any other product used more than once: a stage `gates1`, ... (it is not recomputed);
  * the vector x of `W @ x` unless it is a child state, an embedding row or a
    weight: a stage (`child_sum` when it is a sum of child states, as in TreeFC);
    `W @ concat([a, b, ...])` of equal parts: one (P, m) stage `input` holding
    part q in row q (TreeGRU's reset-gated child states).

A product used once inside an elementwise expression stays in that
expression, and lowering gives it its `<stage>_sum` reduction block (TreeFC's
`internal_h_sum`).  `W @ concat([h_0, h_1, ...])` over the children in order
is one reduction over (child, unit), `W[r, j * H + k] * h[child(n, j), k]`,
and so is one over a stacked stage, `W[r, j * m + k] * input[j, k]`; a
concatenation of unequal parts reduces part by part.  So `ct.split(p.U @ ct.concat([hl,
hr]) + p.bU, 5)` spells exactly the zoo TreeLSTM's `gates` and `gates_sum`.
"""
from __future__ import annotations

from tvm import tirx

from .. import ra
from .tensor import Tensor

STATE_NAMES = ("h", "c")
#: names the lowered PrimFunc already uses for its parameters
RESERVED = {"word", "features", "children", "num_children", "level_offsets", "roots", "max_level_size", "out"}


def state_name(i: int) -> str:
    return STATE_NAMES[i] if i < len(STATE_NAMES) else f"s{i}"


def _args(t: Tensor):
    return [a for a in t.args if isinstance(a, Tensor)]


def _embeds(roots, op: str = "embed"):
    """The embedding reads (`p.<table>[node.word]`; `op="features"`: the `node.features` reads) in
    the expression graphs under `roots`."""
    stack, seen = list(roots), set()
    while stack:
        t = stack.pop()
        if id(t) in seen:
            continue
        seen.add(id(t))
        if t.op == op:
            yield t
        stack.extend(_args(t))


def features_read(trace):
    """The width of `node.features` where the cell reads it, else None."""
    read = next(_embeds([*trace.leaf.states, *trace.inner.states], "features"), None)
    return None if read is None else read.size


def tables_read(trace) -> dict:
    """Embedding tables read as p.<table>[node.word]: name -> shape."""
    return {t.attrs["name"]: trace.weight_shapes[t.attrs["name"]]
            for t in _embeds([*trace.leaf.states, *trace.inner.states])}


def reads_inner_words(trace) -> bool:
    """Whether the inner case reads `p.<table>[node.word]` (a word on inner nodes)."""
    return next(_embeds(trace.inner.states), None) is not None


def build_program(trace) -> ra.RecProgram:
    """The RA program of a traced cell (weights declared in the order they were given)."""
    env = _Env(trace)
    leaf = _Stage(trace.leaf, "leaf", env).state_computes
    internal = _Stage(trace.inner, "internal", env).state_computes
    return ra.rec_compute(ra.Tree(max_children=trace.max_children),
                          {s: (leaf[i], internal[i]) for i, s in enumerate(env.states)})


class _Env:
    """RA objects shared by both cases: weights, the word input, the recursive states, names."""

    def __init__(self, trace):
        self.n = ra.node()
        self.weights = {name: ra.weight(name, shape) for name, shape in trace.weight_shapes.items()}
        tables = tables_read(trace)
        # optional: inner nodes may lack a word, and the linearizer marks those
        self.word = ra.node_input("word", bound=min(s[0] for s in tables.values()),
                                  optional=reads_inner_words(trace)) if tables else None
        width = features_read(trace)
        self.features = ra.node_features("features", width) if width is not None else None
        self.states = [ra.rec_placeholder(state_name(i), shape) for i, shape in enumerate(trace.state_shapes)]
        self.taken = set(self.weights) | {s.name for s in self.states} | RESERVED

    def fresh(self, base: str) -> str:
        name, k = base, 0
        while name in self.taken:
            k += 1
            name = f"{base}{k}"
        self.taken.add(name)
        return name


class _Stage:
    """Plans one case's stages (at program-build time) and emits their bodies (at lowering)."""

    def __init__(self, case, stage: str, env: _Env):
        self.env, self.stage = env, stage
        self.prefix = "leaf_" if stage == "leaf" else ""
        self.stages = {}                  # id(tensor) -> (ra.Compute, groups or None)
        self._plan(case.states)
        self.state_computes = []
        for i, t in enumerate(case.states):
            name = env.fresh(f"{stage}_{state_name(i)}")
            if any(t is s for s in case.states[:i]):        # one tensor returned as two states
                first = self.stages[id(t)][0]
                self.state_computes.append(ra.compute(t.shape, lambda r, f=first: f[r], name=name))
                continue
            compute = self._compute(t, name)
            self.state_computes.append(compute)

    # -- planning -------------------------------------------------------------------------
    def _plan(self, roots):
        """Decide, children first, which tensors get a stage of their own."""
        order, parents, seen = [], {}, set()

        def visit(t):
            if id(t) in seen:
                return
            seen.add(id(t))
            for a in _args(t):
                parents.setdefault(id(a), []).append(t)
                visit(a)
            order.append(t)
        for t in roots:
            visit(t)
        roots_ids = {id(t) for t in roots}
        self._reduces = {}
        for t in order:                     # post-order: arguments are decided first
            users = parents.get(id(t), [])
            if id(t) in roots_ids:
                pass                        # a state: its compute is made after planning
            elif self._splits(t, users) and self._has_reduction(t):
                self._compute(t, self.env.fresh(f"{self.prefix}gates"), groups=self._splits(t, users))
            elif any(u.op == "matvec" for u in users) and t.op == "concat" and _stacked(t):
                self._compute_stacked(t, self.env.fresh(f"{self.prefix}input"))
            elif any(u.op == "matvec" for u in users) and not self._direct(t) and t.op != "concat":
                self._compute(t, self.env.fresh(self._input_name(t)))
            elif any(u.op == "concat" and self._feeds_matvec(u, parents) and not _stacked(u) for u in users) \
                    and not self._direct(t):
                self._compute(t, self.env.fresh(self._input_name(t)))
            elif len(users) > 1 and self._has_reduction(t):
                self._compute(t, self.env.fresh(f"{self.prefix}gates"))
            # a reduction stays inline in users unless t has a stage (states get theirs later)
            self._reduces[id(t)] = id(t) not in self.stages and id(t) not in roots_ids and (
                t.op == "matvec" or any(self._reduces.get(id(a), False) for a in _args(t)))

    def _has_reduction(self, t) -> bool:
        return t.op == "matvec" or any(self._reduces.get(id(a), False) for a in _args(t))

    @staticmethod
    def _splits(t, users) -> int | None:
        counts = [u.attrs["count"] for u in users if u.op == "piece"]
        return counts[0] if counts else None

    @staticmethod
    def _feeds_matvec(concat, parents) -> bool:
        return any(u.op == "matvec" and u.args[1] is concat for u in parents.get(id(concat), []))

    def _direct(self, t) -> bool:
        """Read as is by a reduction: a child state, an embedding row, a 1-D weight, a stage."""
        return t.op in ("child", "embed", "features", "weight") or id(t) in self.stages

    def _input_name(self, t) -> str:
        if self.stage == "internal" and _is_child_sum(t):
            return "child_sum"
        return f"{self.prefix}input"

    def _compute(self, t: Tensor, name: str, groups: int | None = None):
        if groups:
            m = t.size // groups
            compute = ra.compute((groups, m), lambda g, i: self._inline(t, g * m + i), name=name)
        else:
            compute = ra.compute(t.shape, lambda i: self._inline(t, i), name=name)
        self.stages[id(t)] = (compute, groups)
        return compute

    def _compute_stacked(self, t: Tensor, name: str):
        """A concat of P equal parts as one (P, m) stage, part q in row q, so that `W @ concat`
        is one reduction over (q, k) like the zoo's `W[r, j * m + k] * x[j, k]`."""
        parts = t.args

        def row(q, i):
            value = self._read(parts[-1], i)
            for p in range(len(parts) - 2, -1, -1):       # q == 0 ? part 0 : (q == 1 ? part 1 : ...)
                value = ra.if_then_else(q == p, self._read(parts[p], i), value)
            return value
        compute = ra.compute((len(parts), parts[0].size), row, name=name)
        self.stages[id(t)] = (compute, len(parts))
        return compute

    # -- emission (runs inside ra.compute bodies, while lowering) -----------------------------
    def _read(self, t, r):
        """Element r (a flat index) of t: from its stage if it has one, else inline."""
        if isinstance(t, float):
            return tirx.const(t, "float32")
        if id(t) in self.stages:
            compute, groups = self.stages[id(t)]
            if groups:
                m = t.size // groups
                return compute[tirx.floordiv(r, m), tirx.floormod(r, m)]
            return compute[r]
        return self._inline(t, r)

    def _inline(self, t, r):
        env, op = self.env, t.op
        if op == "weight":
            return env.weights[t.attrs["name"]][r]
        if op == "embed":
            table = env.weights[t.attrs["name"]]
            if env.word.missing is None:
                return table[env.word[env.n], r]
            row = table[env.word.index(env.n), r]       # index: in range where the marker is stored
            return row if self.stage == "leaf" else ra.if_then_else(env.word.present(env.n), row, ra.zero())
        if op == "features":
            return env.features[env.n, r]
        if op == "child":
            return env.states[t.attrs["state"]][ra.child(env.n, t.attrs["j"]), r]
        if op == "unary":
            return _UNARY[t.attrs["fn"]](self._read(t.args[0], r))
        if op == "binary":
            a, b = (self._read(x, r) for x in t.args)
            return _BINARY[t.attrs["fn"]](a, b)
        if op == "matvec":
            return self._reduce(*t.args, r)
        if op == "piece":
            source, q, k = t.args[0], t.attrs["index"], t.attrs["count"]
            if id(source) in self.stages and self.stages[id(source)][1] == k:
                return self.stages[id(source)][0][q, r]
            return self._read(source, q * t.size + r)
        if op == "concat":
            return self._select(t.args, r)
        raise AssertionError(f"unknown traced op {op!r}")

    def _select(self, parts, r, offset=0):
        """concat read elementwise: the part that holds element r (TIR's if_then_else is lazy)."""
        head, rest = parts[0], parts[1:]
        if not rest:
            return self._read(head, r - offset)
        return ra.if_then_else(r < offset + head.size, self._read(head, r - offset),
                               self._select(rest, r, offset + head.size))

    def _reduce(self, W: Tensor, x: Tensor, r):
        """(W @ x)[r] as ra.sum reductions."""
        weight = self.env.weights[W.attrs["name"]]
        if x.op == "concat" and id(x) in self.stages:      # a stacked concat: one (part, unit) reduction
            stacked, (parts, m) = self.stages[id(x)][0], (len(x.args), x.args[0].size)
            j, k = ra.reduce_axis(parts, "j"), ra.reduce_axis(m, "k")
            return ra.sum(weight[r, j * m + k] * stacked[j, k], [j, k])
        if x.op == "concat":
            parts = x.args
            if _children_in_order(parts):           # W[r, j*m + k] * h[child(n, j), k]: the zoo's form
                m, state = parts[0].size, self.env.states[parts[0].attrs["state"]]
                j, k = ra.reduce_axis(len(parts), "j"), ra.reduce_axis(m, "k")
                return ra.sum(weight[r, j * m + k] * state[ra.child(self.env.n, j), k], [j, k])
            total, offset = None, 0
            for part in parts:
                term = self._reduce_part(weight, offset, part, r)
                total = term if total is None else total + term
                offset += part.size
            return total
        return self._reduce_part(weight, 0, x, r)

    def _reduce_part(self, weight, offset, x, r):
        k = ra.reduce_axis(x.size, "e" if x.op in ("embed", "features") else "k")
        column = k if offset == 0 else offset + k
        return ra.sum(weight[r, column] * self._read(x, k), k)


def _children_in_order(parts) -> bool:
    """parts are state s of children 0, 1, ..., P-1 (P > 1), each unmaterialized."""
    first = parts[0]
    return len(parts) > 1 and all(
        p.op == "child" and p.attrs["j"] == q and p.attrs["state"] == first.attrs["state"]
        for q, p in enumerate(parts))


def _stacked(concat) -> bool:
    """A concat fed to `W @` that gets a (P, m) stage of its own: equal parts, not simply the
    children's states in order (that one reads the states directly)."""
    sizes = {p.size for p in concat.args}
    return len(concat.args) > 1 and len(sizes) == 1 and not _children_in_order(concat.args)


def _is_child_sum(t) -> bool:
    if t.op == "child":
        return True
    return t.op == "binary" and t.attrs["fn"] == "+" and all(
        isinstance(a, Tensor) and _is_child_sum(a) for a in t.args)


_UNARY = {
    "sigmoid": ra.sigmoid,
    "tanh": ra.tanh,
    "exp": ra.exp,
    "relu": lambda v: tirx.max(v, tirx.const(0.0, "float32")),
    "neg": lambda v: -v,
}
_BINARY = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b, "/": lambda a, b: a / b}
