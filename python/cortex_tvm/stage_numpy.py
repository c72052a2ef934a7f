"""A lowered stage as numpy: its blocks read once into expressions over named axes, evaluated
for all the nodes of a level at once.

`lower.build_stage` turns one case of an RA program (leaves, or one level of internal nodes)
into a PrimFunc whose blocks each compute one tensor with a leading axis over the level's
nodes.  `StageNumpy` reads those blocks into a small expression tree (`Expr`), once, and
evaluates it with numpy on whole arrays: an index expression becomes an integer array over the
block's axes, a read a gather, and a reduction of a product a matrix product (`contract`).
The adjoint (`adjoint.py`) walks the same trees backwards.  Example, TreeFC's internal stage::

    internal_h_sum[v_i0, v_i1] += W[v_i1, v_k] * child_sum[v_i0, v_k]     (block)
    -> Expr("mul", load W[v_i1, v_k], load child_sum[v_i0, v_k]), reduced over v_k
    -> contract((W, (v_i1, v_k)), (child_sum, (v_i0, v_k)), out=(v_i0, v_i1))   (one matmul)

Values are arrays with named axes (`named_axes`).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import tvm

from .named_axes import contract, elementwise, expand, times_missing, union

# expression kinds whose value is computed elementwise from their arguments' values
_BINARY = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": np.divide,
           "Min": np.minimum, "Max": np.maximum, "EQ": np.equal, "NE": np.not_equal, "LT": np.less,
           "LE": np.less_equal, "GT": np.greater, "GE": np.greater_equal, "And": np.logical_and,
           "Or": np.logical_or, "FloorDiv": np.floor_divide, "FloorMod": np.mod}
_CALLS = {"tirx.sigmoid": lambda x: 1.0 / (1.0 + np.exp(-x)), "tirx.tanh": np.tanh, "tirx.exp": np.exp}


@dataclass(eq=False)
class Expr:
    """One node of a block's expression: `kind` is the TIR class name (Add, Mul, ...), "call"
    (`name` = the TIR op), "load" (`source` = the buffer, `args` = its indices), "const" or "var"."""

    kind: str
    args: tuple = ()
    name: str = ""
    value: float = 0.0
    source: object = None
    dtype: str = "float32"
    #: True when a float tensor is read under this node (so an adjoint flows into it)
    reads_float: bool = False
    #: the buffers of the float reads under this node (set by StageNumpy)
    sources: frozenset = field(default_factory=frozenset)


@dataclass(eq=False)
class Block:
    """One block: `out[spatial axes] (+)= body`, reduced over `reduce_axes` when it is a sum."""

    name: str
    out: object                         # the buffer written
    spatial: tuple                      # axis names, in the order of `out`'s dimensions
    reduce_axes: tuple                  # axis names summed over (empty: not a reduction)
    extents: dict                       # axis name -> int extent, or None: the level's size
    body: Expr


def _parse(e, var_names: dict, free_vars: dict) -> Expr:
    kind = type(e).__name__
    dtype = str(e.ty.dtype) if hasattr(e.ty, "dtype") else "int32"
    if kind in ("FloatImm", "IntImm"):
        return Expr("const", value=float(e.value) if kind == "FloatImm" else int(e.value), dtype=dtype)
    if kind == "Var":
        name = var_names.get(e) or free_vars.get(e)
        if name is None:
            raise ValueError(f"stage_numpy: the variable {e} is neither an axis nor a known scalar")
        return Expr("var", name=name, dtype=dtype)
    if kind == "TensorLoad":
        args = tuple(_parse(i, var_names, free_vars) for i in e.indices)
        return Expr("load", args, source=e.source, dtype=dtype, reads_float=dtype.startswith("float"))
    if kind == "Call":
        name = e.op.name
        args = tuple(_parse(a, var_names, free_vars) for a in e.args)
        kind = "select" if name.endswith(".if_then_else") else "call"
    elif kind == "Select":
        args = tuple(_parse(a, var_names, free_vars) for a in (e.condition, e.true_value, e.false_value))
        kind, name = "select", ""
    elif kind in ("Cast", "Not"):
        args, name = (_parse(e.value if kind == "Cast" else e.a, var_names, free_vars),), ""
    elif kind in _BINARY:
        args, name = (_parse(e.a, var_names, free_vars), _parse(e.b, var_names, free_vars)), ""
    else:
        raise NotImplementedError(f"no rule for the TIR expression {kind} ({e})")
    if kind == "call" and name not in _CALLS:
        raise NotImplementedError(f"no rule for the call {name}")
    return Expr(kind, args, name=name, dtype=dtype, reads_float=any(a.reads_float for a in args))


def sblocks(stmt):
    """The s_tir blocks under `stmt` (a stage's loop nests), in execution order."""
    if isinstance(stmt, tvm.s_tir.stmt.SBlockRealize):
        yield stmt.block
    elif isinstance(stmt, tvm.tirx.stmt.SeqStmt):
        for s in stmt:
            yield from sblocks(s)
    else:
        yield from sblocks(stmt.body)


def read_blocks(func, free_vars: dict) -> list:
    """The blocks of a TE-made stage PrimFunc (`lower.Stage.func`), in execution order.

    free_vars: scalar Vars a body may read besides its axes (the level's offset) -> name."""
    blocks = []
    for b in sblocks(func.body.block.body):
        names, extents = {}, {}
        for iv in b.iter_vars:
            name = iv.var.name
            while name in extents:
                name += "_"
            names[iv.var] = name
            ext = iv.dom.extent
            extents[name] = int(ext.value) if type(ext).__name__ == "IntImm" else None
        store = b.body
        value = store.value
        spatial = tuple(names[iv.var] for iv in b.iter_vars if iv.iter_type == 0)
        reduce_axes = tuple(names[iv.var] for iv in b.iter_vars if iv.iter_type != 0)
        if reduce_axes:
            # TE writes a sum as out[i] = out[i] + body (with an init block): keep the body
            if type(value).__name__ != "Add" or not _is_self_load(value.a, store.buffer):
                raise NotImplementedError(f"stage_numpy: block {b.name_hint!r} reduces with something "
                                          "other than a sum")
            value = value.b
        try:
            body = _parse(value, names, free_vars)
        except NotImplementedError as err:
            raise NotImplementedError(f"{err} in block {b.name_hint!r}") from None
        blocks.append(Block(b.name_hint, store.buffer, spatial, reduce_axes, extents, body))
    return blocks


def _rename_sources(e: Expr, keys: dict) -> frozenset:
    """Name `e`'s buffers by `keys`; sets and returns `e.sources`."""
    below = [_rename_sources(a, keys) for a in e.args]
    if e.kind == "load":
        e.source = keys[e.source]
        below.append(frozenset([e.source]) if e.reads_float else frozenset())
    e.sources = frozenset().union(*below)
    return e.sources


def _is_self_load(e, buffer) -> bool:
    return type(e).__name__ == "TensorLoad" and e.source.same_as(buffer)


def walk(e: Expr):
    """`e` and every expression under it."""
    yield e
    for a in e.args:
        yield from walk(a)


def loads(e: Expr):
    """Every read under `e`, indices' reads included."""
    if e.kind == "load":
        yield e
    for a in e.args:
        yield from loads(a)


def factors(e: Expr) -> list:
    """The factors of a product tree (`a * b * c` -> [a, b, c]); [e] for anything else."""
    if e.kind == "Mul":
        return factors(e.args[0]) + factors(e.args[1])
    return [e]


# ----------------------------------------------------------------------------- one stage
class StageNumpy:
    """One lowered stage, evaluated with numpy for the nodes [offset, offset + size) of a level.

    `env` maps each placeholder buffer of the stage to its array (weights, the states of every
    slot, the children and word arrays); `evaluate` computes every block's tensor, leading axis
    over the level's nodes, into `values` (buffer -> array), and remembers each
    subexpression's value for the adjoint (`memo`).
    """

    def __init__(self, stage):
        self.stage = stage
        self.blocks = read_blocks(stage.func, {stage.offset: "offset"})
        # buffers are named by plain strings from here on (TVM objects hash through the FFI)
        keys = {}
        for buf in [*stage.placeholders.values(), *stage.outputs.values(), *(b.out for b in self.blocks)]:
            if buf not in keys:
                keys[buf] = f"{buf.name}#{len(keys)}"
        for block in self.blocks:
            block.out = keys[block.out]
            _rename_sources(block.body, keys)
        #: buffer key -> RA object (weight, state, node input, "children"/"num_children")
        self.placeholder_of = {keys[buf]: key for key, buf in stage.placeholders.items()}
        #: the program's states, in order
        self.states = list(stage.outputs)
        #: state -> the key of the buffer the stage writes it to
        self.output_key = {state: keys[buf] for state, buf in stage.outputs.items()}
        #: id of each float-valued expression -> the node axis of its block: a level's values of it
        #: are a slice of the whole stage's (`slice_memo`)
        self.node_axis_of = {id(e): self.position_axis(block) for block in self.blocks
                             for e in walk(block.body) if e.dtype.startswith("float")}
        #: id of a level-invariant read -> (axes, shape) when it reads its whole array in order (a
        #: weight row-block read as U[g*H + i, j*H + k]: a reshape, no gather), else None
        self.reshapes = {}
        #: ids of the reads that give the same values at every level (cached per call)
        self.invariant = {id(load) for block in self.blocks for load in loads(block.body)
                          if self.level_invariant(load, block)}

    def level_invariant(self, load: Expr, block: Block) -> bool:
        """Whether a read gives the same values at every level: no node axis, no offset, no read
        through another array (children, words) in its indices."""
        position = self.position_axis(block)

        def plain(e):
            if e.kind == "load":
                return False
            if e.kind == "var":
                return e.name != "offset" and e.name != position
            return all(plain(a) for a in e.args)
        return all(plain(a) for a in load.args)

    @staticmethod
    def position_axis(block: Block):
        return next((a for a, n in block.extents.items() if n is None), None)

    # -- forward --------------------------------------------------------------------------
    def evaluate(self, env: dict, offset: int, size: int, cache: dict):
        """Every block's value for the level's nodes; returns (values, memo).

        cache: values of level-invariant reads, kept across the levels of one call."""
        values, memo = {}, {}
        for block in self.blocks:
            ctx = self.context(env, values, memo, block, offset, size, cache)
            if block.reduce_axes:
                result = ctx.reduction(block.body, block.spatial)
            else:
                result = ctx.value(block.body)
            array, shape = expand(result, block.spatial), tuple(ctx.extents[a] for a in block.spatial)
            if array.shape != shape:
                array = np.broadcast_to(array, shape)
            # writable: the compiled level pass takes it through DLPack, which refuses read-only arrays
            values[block.out] = np.require(array, np.float32, ["C", "W"])
        return values, memo

    def slice_memo(self, memo: dict, rows: slice) -> dict:
        """The float values of `memo` (over a range of nodes) at the nodes `rows` of that range, as
        views.  Integer values (indices, which depend on the level's offset) are left out: they
        are recomputed where needed."""
        out = {}
        for key, (array, axes) in memo.items():
            axis = self.node_axis_of.get(key)
            if axis is None:
                continue
            if axis in axes:
                index = [slice(None)] * len(axes)
                index[axes.index(axis)] = rows
                array = array[tuple(index)]
            out[key] = (array, axes)
        return out

    def context(self, env, values, memo, block, offset, size, cache):
        """The evaluation of `block`'s expressions for the nodes [offset, offset + size)."""
        extents = {a: (size if n is None else n) for a, n in block.extents.items()}
        return _Eval(self, env, values, memo, extents, offset, block, cache)


class _Eval:
    """Evaluation of one block's expressions at one level (values memoized by node)."""

    def __init__(self, stage: StageNumpy, env, values, memo, extents, offset, block, cache):
        self.stage, self.env, self.values, self.memo = stage, env, values, memo
        self.extents, self.offset, self.block, self.cache = extents, offset, block, cache

    def value(self, e: Expr):
        key = id(e)
        if key not in self.memo:
            self.memo[key] = self._compute(e)
        return self.memo[key]

    def _compute(self, e: Expr):
        kind = e.kind
        if kind == "const":
            return np.asarray(e.value, dtype=np.float32 if e.dtype.startswith("float") else np.int64), ()
        if kind == "var":
            if e.name == "offset":
                return np.asarray(self.offset, np.int64), ()
            return np.arange(self.extents[e.name], dtype=np.int64), (e.name,)
        if kind == "load":
            return self.load(e)
        args = [self.value(a) for a in e.args]
        if kind in _BINARY:
            if kind == "Div" and not e.dtype.startswith("float"):
                return elementwise(np.floor_divide, *args)    # TIR int division truncates; indices are >= 0
            return elementwise(_BINARY[kind], *args)
        if kind == "call":
            return _CALLS[e.name](args[0][0]), args[0][1]
        if kind == "select":
            return elementwise(np.where, *args)
        if kind == "Not":
            return np.logical_not(args[0][0]), args[0][1]
        if kind == "Cast":
            return args[0][0].astype(np.float32 if e.dtype.startswith("float") else np.int64), args[0][1]
        raise NotImplementedError(kind)

    def source_array(self, source):
        if source in self.values:
            return self.values[source]
        return self.env[source]

    def indices(self, e: Expr):
        """The load's indices as arrays broadcast over one axis tuple (None: all plain axes, in
        order, or constants: a basic-indexing view will do)."""
        idx = [self.value(a) for a in e.args]
        axes = union(*(v[1] for v in idx))
        return [expand(v, axes) for v in idx], axes

    def load(self, e: Expr):
        invariant = id(e) in self.stage.invariant and e.source not in self.values
        if invariant and id(e) in self.cache:
            return self.cache[id(e)]
        array = self.source_array(e.source)
        basic = basic_index(e, self.extents)
        if basic is not None:
            index, axes = basic
            result = array[index], axes
        elif invariant and self.stage.reshapes.get(id(e)):
            result = array.reshape(self.stage.reshapes[id(e)][1]), self.stage.reshapes[id(e)][0]
        else:
            idx, axes = self.indices(e)
            result = array[tuple(idx)], axes
            if invariant and id(e) not in self.stage.reshapes:
                self.stage.reshapes[id(e)] = _as_reshape(array, idx, axes)
        if invariant:
            self.cache[id(e)] = result
        return result

    def reduction(self, e: Expr, keep: tuple):
        """sum over the block's reduction axes of `e`, over the axes `keep`: a sum of terms term
        by term, a product as one contraction (never the whole broadcast)."""
        if e.kind in ("Add", "Sub"):
            a, b = (self.reduction(x, keep) for x in e.args)
            return elementwise(np.add if e.kind == "Add" else np.subtract, a, b)
        parts = [self.value(f) for f in factors(e)]
        result = contract(parts, keep, self.extents)
        return times_missing(result, parts, self.block.reduce_axes, self.extents)


def _as_reshape(array, idx, axes):
    """(axes, shape) when the gather array[idx] is a reshape of the whole array, else None."""
    return (axes, np.broadcast_shapes(*(i.shape for i in idx))) if reads_in_order(idx, array.shape) else None


def reads_in_order(idx, shape) -> bool:
    """Whether the index arrays `idx` (broadcast together) read every element of an array of
    `shape` once, in row-major order: the gather is a reshape of the whole array, and a scatter
    back a reshape too (`U[g*H + i, j*H + k]` over (g, i, j, k) of U's (5H, 2H))."""
    full = np.broadcast_shapes(*(i.shape for i in idx))
    if int(np.prod(full, dtype=np.int64)) != int(np.prod(shape, dtype=np.int64)):
        return False
    flat = np.ravel_multi_index(tuple(np.broadcast_to(i, full) for i in idx), shape).reshape(-1)
    return bool((flat == np.arange(flat.size)).all())


def basic_index(e: Expr, extents: dict):
    """(index tuple, axes) when every index of the load is a distinct plain axis or a constant, so
    numpy's basic indexing gives the values as a view; None otherwise."""
    index, axes = [], []
    for a in e.args:
        if a.kind == "var" and a.name != "offset" and a.name not in axes:
            index.append(slice(0, extents[a.name]))
            axes.append(a.name)
        elif a.kind == "const":
            index.append(int(a.value))
        else:
            return None
    return tuple(index), tuple(axes)
