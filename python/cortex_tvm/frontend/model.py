"""`ct.compile`: a traced recursive cell as a model of the zoo, lowered and built the same way.

`TracedModel` is a `models.Model` whose weight shapes come from the given
weights and whose RA program comes from the trace, so lowering, every
schedule and recipe, the tuner, Relax embedding, export and CUDA apply to it
unchanged.
"""
from __future__ import annotations

from .. import ra
from ..models.base import Model, check_sizes
from ..models.program import ProgramModel
from ..weights import to_numpy
from . import numpy_levels, to_ra
from .trace import Recursive, trace


class TracedModel(Model):
    """A model written as a `@ct.recursive` function (see `cortex_tvm.compile`).

    Its weights are the ones given (names as the function reads them, p.<name>),
    its states are what the function returns (the first is the model's output),
    and `reference(trees)` evaluates the same trace with numpy.  Example::

        model = TracedModel(tree_fc, {"emb": emb, "W": W, "b": b}, max_children=2)
        print(ct.frontend.ra_text(model.program))      # the RA program it traces to
        rs = ct.RecSchedule(model.lower(specialize_leaves=False))   # schedule it by hand
    """

    def __init__(self, fn: Recursive, weights: dict, max_children: int = 2, features: int | None = None):
        check_sizes(max_children=max_children, **({} if features is None else {"features": features}))
        if not hasattr(weights, "items"):
            raise TypeError(f"weights: expected a dict of name -> array, got {type(weights).__name__}")
        shapes = {}
        for name, value in weights.items():
            if not isinstance(name, str) or not name.isidentifier():
                raise ValueError(f"weights: {name!r} is not a name the function can read as p.<name>")
            shapes[name] = tuple(int(s) for s in to_numpy(name, value).shape)
            if len(shapes[name]) not in (1, 2):
                raise ValueError(f"weights: {name!r} has shape {shapes[name]}; a weight is a vector (a bias) "
                                 "or a matrix (for @, or an embedding table)")
        self.fn, self._max_children, self._shapes = fn, int(max_children), shapes
        #: the width of `node.features` (given with each batch), None when the cell reads none
        self.feature_size = None if features is None else int(features)
        self.trace = trace(fn, shapes, self._max_children, self.feature_size)
        if self.feature_size is not None and to_ra.features_read(self.trace) is None:
            raise ValueError(f"features={features}: {self.trace.name} never reads node.features")
        tables = to_ra.tables_read(self.trace)
        if tables and self.feature_size is not None:
            raise ValueError(f"{self.trace.name} reads both node.features and p.<table>[node.word]: one "
                             "input per node is supported (concatenate the features)")
        self.vocab_size = min(s[0] for s in tables.values()) if tables else None
        self.hidden_size = self.trace.state_shapes[0][0]
        self.embed_size = next(iter(tables.values()))[1] if tables else self.feature_size or self.hidden_size
        #: inner nodes may carry words (`Model.no_word` marks those without)
        self.reads_inner_words = to_ra.reads_inner_words(self.trace)
        #: how each weight axis scales with the sizes, when the function traces consistently at
        #: other sizes (then `padding` can round them up as for a zoo model); None: fixed shapes
        self._axes = self._scaling_axes(set(tables))
        self._traces = {self._key(shapes): self.trace}
        self._program = None
        self.load_weights(weights)          # validated float32 copies

    def __repr__(self):
        shapes = ", ".join(f"{to_ra.state_name(i)}{s}" for i, s in enumerate(self.trace.state_shapes))
        return f"TracedModel({self.trace.name}: states {shapes}, max_children={self._max_children})"

    @property
    def max_children(self) -> int:
        return self._max_children

    def weight_shapes(self) -> dict:
        """The given weights' shapes, or, for a copy at other sizes (`padding`), those sizes'."""
        if self._axes is None:
            return dict(self._shapes)
        return self._shapes_at({"hidden_size": self.hidden_size, "embed_size": self.embed_size})

    def build_program(self):
        return to_ra.build_program(self._current_trace())

    def numpy_forward(self, lin):
        return numpy_levels.numpy_forward(self._current_trace(), self.weights, lin, self.no_word)

    # -- sizes ------------------------------------------------------------------------------
    def resized(self, **sizes) -> "TracedModel":
        """As `Model.resized`; the copy keeps its traces apart (a copy of this model's, by sizes)."""
        clone = super().resized(**sizes)
        # shared, the copy's traces at its sizes would land in this model's cache
        clone._traces = dict(self._traces)
        return clone

    @staticmethod
    def _key(shapes):
        return tuple(sorted(shapes.items()))

    def _current_trace(self):
        """The function traced at the current weight shapes (retraced once per set of sizes)."""
        shapes = self.weight_shapes()
        key = self._key(shapes)
        if key not in self._traces:
            self._traces[key] = trace(self.fn, shapes, self._max_children, self.feature_size)
        return self._traces[key]

    def _shapes_at(self, sizes: dict) -> dict:
        return {name: tuple(sizes[axis[0]] * axis[1] if axis else extent
                            for extent, axis in zip(self._shapes[name], self._axes[name]))
                for name in self._shapes}

    def _scaling_axes(self, tables: set):
        """name -> per axis ("hidden_size" | "embed_size", blocks) or None (fixed: a table's
        vocabulary, any other extent), read off the extents and then confirmed: the function
        must trace at hidden_size + 1 and at embed_size + 1 with every state of the new hidden
        size, or the shapes stay fixed (a state that is not one hidden-size block, a weight
        whose extent only happens to be a multiple)."""
        H, E = self.hidden_size, self.embed_size
        if any(d != H for shape in self.trace.state_shapes for d in shape):
            return None
        axes = {}
        for name, shape in self._shapes.items():
            axes[name] = tuple(None if (name in tables and d == 0) else ("hidden_size", n // H) if n % H == 0
                               else ("embed_size", n // E) if n % E == 0 else None for d, n in enumerate(shape))
        self._axes = axes
        steps = [{"hidden_size": H + 1, "embed_size": E}]
        if self.feature_size is None:           # the caller's feature width never moves
            steps.append({"hidden_size": H, "embed_size": E + 1})
        for sizes in steps:
            try:
                moved = trace(self.fn, self._shapes_at(sizes), self._max_children, self.feature_size)
            except (TypeError, ValueError):
                return None
            if any(d != sizes["hidden_size"] for shape in moved.state_shapes for d in shape):
                return None
        return axes


def compile(fn, weights, max_children: int = 2, target="llvm", schedule=None, tuning_log=None,  # noqa: A001
            max_unroll_depth: int | None = None, precision: str = "fp32", training: bool = False,
            features: int | None = None):
    """Trace a `@ct.recursive` function and compile it; the result is called on a list of trees.

    weights: name -> numpy array or torch tensor (float32), read in the function as p.<name>.
    max_children: the most children a node has (a missing child reads zero states).
    target, schedule, tuning_log: as `Model.compile` (the default schedule is
    derived from the traced program and the target).  max_unroll_depth: CORTEX's recursive unrolling
    (`RecSchedule.unroll_recursion`): each node computed in one step with its descendants
    this many levels down, on one thread; None lets the schedule choose (it does not unroll).
    precision: "fp32" or "bf16", training: generate the backward pass (as `Model.compile`).
    features: the width F of `node.features`, for a cell that reads a feature vector per node
    (called as `compiled(trees, features=X)`, X (nodes, F) float32, see
    `CompiledModel.__call__`).  Returns a `CompiledModel`: numpy (B, H), the first state at
    each root.  Errors in the function raise TypeError/ValueError
    naming its line.

    Example::

        @ct.recursive
        def tree_fc(node, p):
            if node.is_leaf:
                return p.emb[node.word]
            return ct.tanh(p.W @ (tree_fc(node.children[0], p) + tree_fc(node.children[1], p)) + p.b)

        compiled = ct.compile(tree_fc, weights={"emb": emb, "W": W, "b": b}, max_children=2)
        roots = compiled(trees)

    `fn` may also be a hand-written RA program (`ra.rec_compute(...)`); its arity is the
    program's own (`max_children` is not used) and its model is a `ct.models.ProgramModel`.
    """
    if isinstance(fn, ra.RecProgram):
        return ProgramModel(fn, weights).compile(target=target, schedule=schedule, tuning_log=tuning_log,
                                                 max_unroll_depth=max_unroll_depth, precision=precision,
                                                 training=training)
    return TracedModel(fn, weights, max_children, features).compile(
        target=target, schedule=schedule, tuning_log=tuning_log, max_unroll_depth=max_unroll_depth,
        precision=precision, training=training)
