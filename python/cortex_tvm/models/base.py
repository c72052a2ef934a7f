"""What every model shares: weights (seeded init, validated loading), lowering, compiling.

A model subclass says three things: its weight shapes, its RA program, and a
numpy level-batched executor (the baseline the demo and benchmarks compare
against).  Everything else (lowering, scheduling, building) is generic.
"""
from __future__ import annotations

import copy

import numpy as np

from .. import compiler as _compiler
from .. import linearize as _linearize
from .. import lower as _lower
from .. import ra
from .. import relax as _relax
from ..build import build_schedule
from ..data import Node
from ..node_features import with_slot_rows
from ..weights import checked_weights


def check_sizes(**sizes):
    """ValueError unless every size is a positive int."""
    for name, value in sizes.items():
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")


class Model:
    """Base of the model zoo.  Subclasses define `weight_shapes`, `build_program`, `numpy_forward`."""

    #: map from other naming schemes (e.g. PyTorch state_dict keys) to ours
    aliases: dict = {}

    def __init__(self, seed: int = 0):
        self._program = None
        self.weights = self.init_weights(seed)

    # -- to be defined by each model ------------------------------------------------------
    def weight_shapes(self) -> dict:
        raise NotImplementedError

    def build_program(self):
        raise NotImplementedError

    def numpy_forward(self, lin: _linearize.Linearized) -> np.ndarray:
        """All states of all slots, level by level in numpy: (num_slots, *state shape) per state."""
        raise NotImplementedError

    @property
    def max_children(self) -> int:
        return self.program.spec.max_children

    @property
    def vocab_bound(self):
        """Word ids must lie in [0, vocab_bound); None when the model reads no words.  A model
        that does not say (no `vocab_size`) is bounded by what its program reads: the
        smallest bound of its node inputs."""
        bound = getattr(self, "vocab_size", None)
        if bound is None:
            bounds = [inp.bound for inp in self.lower(specialize_leaves=False).node_inputs]
            bound = min(bounds) if bounds else None
        return bound

    def __getattr__(self, name):
        # only reached when normal lookup fails: a subclass written as the README says (weight
        # shapes, program, numpy executor) need not also set the sizes the tuner reads
        if name == "hidden_size" and not self.__dict__.get("_building"):
            self.__dict__["_building"] = True
            try:
                return int(self.program.states[0].shape[0])
            finally:
                self.__dict__["_building"] = False
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    # -- weights --------------------------------------------------------------------------
    def init_weights(self, seed: int) -> dict:
        """Seeded random weights like torch's defaults: N(0,1) embeddings, U(+-1/sqrt(fan_in)) else."""
        rng = np.random.default_rng(seed)
        out = {}
        for name, shape in self.weight_shapes().items():
            if name.startswith("emb"):
                w = rng.standard_normal(shape)
            else:
                fan_in = shape[1] if len(shape) > 1 else shape[0]
                bound = fan_in ** -0.5
                w = rng.uniform(-bound, bound, shape)
            out[name] = w.astype(np.float32)
        return out

    def load_weights(self, weights) -> "Model":
        """Replace all weights; `weights` maps names to numpy arrays or torch tensors (a state_dict works).

        Raises ValueError for missing, extra or wrongly shaped weights and
        TypeError for anything that is not a float32 array.  Returns self.
        """
        shapes = self.weight_shapes()
        self.weights = checked_weights(weights, {n: (shape, "float32") for n, shape in shapes.items()},
                                       self.aliases, "load_weights")
        return self

    # -- sizes ----------------------------------------------------------------------------
    #: attributes holding what is built from the sizes, dropped by `resized`
    size_caches = ("_program", "_lowered")

    def resized(self, **sizes) -> "Model":
        """This model at other sizes: a copy with the attributes `sizes` set (e.g. hidden_size=160),
        its program and lowerings dropped so that they are built at the new sizes.  This model is
        not changed.

        The copy's weights are this model's arrays (a dict of its own), at this model's sizes:
        the caller sets weights of the new shapes (`weight_shapes()`), as `padding` sets the
        zero-padded ones.  A subclass holding another cache built from its sizes names it in
        `size_caches` (or overrides this method)."""
        check_sizes(**sizes)
        missing = [name for name in sizes if not hasattr(self, name)]
        if missing:
            raise TypeError(f"{type(self).__name__}.resized: no size attribute {missing[0]!r}")
        clone = copy.copy(self)
        for name in self.size_caches:
            clone.__dict__.pop(name, None)
        clone._program = None
        clone.weights = dict(self.weights)
        for name, value in sizes.items():
            setattr(clone, name, value)
        return clone

    # -- stages ---------------------------------------------------------------------------
    @property
    def program(self):
        if self._program is None:
            self._program = self.build_program()
        return self._program

    def lower(self, specialize_leaves: bool = False, dump=None) -> _lower.Lowered:
        """The RA program lowered to one TIR PrimFunc, before scheduling (cached).

        By default this is the plain ILIR: every level, leaves included, computes
        both cases and selects one; `RecSchedule.specialize_leaves()` (or
        `specialize_leaves=True` here) gives leaves their own loop nest.

        The default (False) is not `cortex_tvm.lower.lower`'s (True): this is where a schedule
        starts (``RecSchedule(model.lower(specialize_leaves=False))``, whose primitives
        specialize leaves themselves), that is the lowering on its own.  The package's callers
        pass it explicitly.
        """
        if dump is not None:
            return _lower.lower(self.program, specialize_leaves=specialize_leaves, dump=dump)
        cache = self.__dict__.setdefault("_lowered", {})
        if specialize_leaves not in cache:
            cache[specialize_leaves] = _lower.lower(self.program, specialize_leaves=specialize_leaves)
        return cache[specialize_leaves]

    def compile(self, target="llvm", schedule=None, tuning_log=None, bounds_check=False, max_unroll_depth=None,
                precision="fp32", training=False):
        """Lower, schedule and build; the result is called on a list of trees.

        schedule: a recipe name from `cortex_tvm.schedules` (default: the derived schedule for
        this model and target at its analytic point), "ranked" (the knobs the shipped cost
        model ranks first, unmeasured) or a callable taking a RecSchedule.
        bounds_check=True: validate the linearized arrays on every call too (`run(lin)` always does).
        precision="bf16": the packed GEMM weights are kept as bfloat16 (half the bytes a level
        streams), states and accumulation stay float32; "fp32" (the default) keeps float32.
        training=True: also generate the backward pass (`compiled.vjp(trees)`; `as_torch()` with
        parameters whose `.grad` a `loss.backward()` fills; docs/training.md); with
        precision="bf16" (a CPU with AVX512_BF16) its products of weights and node values take
        bfloat16 inputs, summed in float32, as PyTorch's bfloat16 autocast rounds a matmul's.
        The weights loaded now are the ones the compiled model uses.
        """
        return _compiler.compile_model(self, target=target, schedule=schedule, tuning_log=tuning_log,
                                       max_unroll_depth=max_unroll_depth, bounds_check=bounds_check,
                                       precision=precision, training=training)

    def as_relax(self, target="llvm", precision="fp32"):
        """This model in a Relax IRModule (see `cortex_tvm.relax.as_relax`)."""
        return _relax.as_relax(self, target, precision=precision)

    def build(self, rs, target="llvm"):
        """A schedule of this model's program, built with its current weights (`RecSchedule.build`)."""
        return build_schedule(self, rs, target)

    #: whether the model reads words on inner nodes (x = 0 at a node without a word)
    reads_inner_words = False

    @property
    def no_word(self):
        """What `lin.words` holds at a node without a word: vocab_bound for models that read
        words on inner nodes (their node input is `optional`), None otherwise; 0 for a model fed
        per-node features and no words (any node may carry a word, and none is read)."""
        if self.vocab_bound is None and self.lower(specialize_leaves=False).node_features:
            return 0
        return self.vocab_bound if self.reads_inner_words else None

    @property
    def fixed_sizes(self) -> tuple:
        """Sizes `padding` leaves as given: the width of the features a caller passes per call."""
        return ("embed_size",) if self.lower(specialize_leaves=False).node_features else ()

    def linearize(self, trees, pad=1, features=None, distinct_leaves=False) -> _linearize.Linearized:
        """The batch laid out for the numpy executors; `features` (one row per node, post-order
        per tree) for a program that reads `ra.node_features`; `distinct_leaves`: each word's
        first leaf before its repeats (`linearize.linearize`'s, the compiled training pass's)."""
        lin = _linearize.linearize(trees, self.max_children, pad=pad, vocab_size=self.vocab_bound,
                                   allow_shared=self.program.spec.kind == "dag", no_word=self.no_word,
                                   distinct_leaves=distinct_leaves)
        if features is None:
            return lin
        read = self.lower(specialize_leaves=False).node_features
        if not read:
            raise ValueError("features=: this model reads no per-node features")
        return with_slot_rows(lin, features, read[0].name, read[0].size)

    def reference(self, trees, features=None) -> np.ndarray:
        """Root states from the numpy level-batched executor (the demo's baseline)."""
        lin = self.linearize(trees, features=features)
        return self.numpy_forward(lin)[0][lin.roots]

    def flops(self, lin: _linearize.Linearized) -> float:
        """Useful multiply-add FLOPs for one batch (for GFLOP/s reports); 0 if unknown."""
        return 0.0

    def runtime_flops(self, trees, leaves_hoisted: bool) -> float:
        """The useful FLOPs a kernel does at run time on `trees`: all of `flops`, less the leaves'
        share when they are table lookups (`hoist`: that work was done at compile time)."""
        lin = self.linearize(trees)            # no padding: real nodes only
        flops = self.flops(lin)
        if leaves_hoisted:
            leaves = int(lin.level_offsets[1] - lin.level_offsets[0])
            flops -= leaves * self.flops(self.linearize([Node(word=0)]))
        return flops


#: what a WordModel reads at a node: a word id into its embedding table `emb`, or a feature
#: vector that comes with each batch (`ra.node_features`: contextual token embeddings, AST
#: node or atom features)
INPUTS = ("words", "features")


class WordModel(Model):
    """A model reading an input vector per node: hidden size H, input size E (H unless given).

    inputs="words" (the default): x = emb[word], vocabulary V = vocab_size, `emb (V, E)` a weight.
    inputs="features": x is the node's row of the (nodes, E) float32 array given with each
    batch (`compiled(trees, features=X)`); no vocabulary, no `emb` weight.  The programs
    read x through `node_vector`, the numpy executors through `input_rows`.
    """

    def __init__(self, hidden_size: int, vocab_size: int | None = None, embed_size: int | None = None,
                 seed: int = 0, inputs: str = "words"):
        if inputs not in INPUTS:
            raise ValueError(f"inputs must be one of {INPUTS}, got {inputs!r}")
        if inputs == "features" and vocab_size is not None:
            raise ValueError("inputs='features' reads no word ids, so there is no vocabulary: leave vocab_size "
                             "out (embed_size is the number of features per node)")
        if inputs == "words" and vocab_size is None:
            raise ValueError("vocab_size is required to read word ids (or pass inputs='features' and "
                             "embed_size=<features per node>)")
        embed_size = hidden_size if embed_size is None else embed_size
        check_sizes(hidden_size=hidden_size, embed_size=embed_size,
                    **({"vocab_size": vocab_size} if inputs == "words" else {}))
        self.inputs = inputs
        self.hidden_size, self.vocab_size, self.embed_size = hidden_size, vocab_size, embed_size
        super().__init__(seed)

    def input_weights(self) -> dict:
        """The input table among the weights: {"emb": (V, E)}, nothing with inputs="features"."""
        return {} if self.inputs == "features" else {"emb": (self.vocab_size, self.embed_size)}

    def node_vector(self, optional: bool = False):
        """The program's per-node input, as (x, present): `x(e)` is element e of the current
        node's input vector (emb[word[n], e], or the batch's features x[n, e]); `present(n)`
        tests whether node n has one, None where every node it is read at does (features:
        every node; words read at leaves only, optional=False)."""
        n = ra.node()
        if self.inputs == "features":
            x = ra.node_features("features", self.embed_size)
            return (lambda e: x[n, e]), None
        word = ra.node_input("word", bound=self.vocab_size, optional=optional)
        emb = ra.weight("emb", (self.vocab_size, self.embed_size))
        return (lambda e: emb[word.index(n), e]), (word.present if optional else None)

    def inner_vector(self, x, present, name: str = "inner_x"):
        """x at an inner node as a per-node compute: x itself, or 0 where the node has none."""
        if present is None:
            return ra.compute((self.embed_size,), x, name=name)
        n = ra.node()
        return ra.compute((self.embed_size,), lambda e: ra.if_then_else(present(n), x(e), ra.zero()), name=name)

    def has_input(self, lin, start=None, end=None) -> np.ndarray:
        """Which slots of [start, end) have an input x, for the numpy executors: all of them with
        features, or with words read at leaves only; else those holding a word (not no_word)."""
        words = lin.words[start:end]
        if self.inputs == "features" or self.no_word is None:
            return np.ones(words.shape, bool)
        return words != self.no_word

    def input_rows(self, lin, start=None, end=None) -> np.ndarray:
        """x at slots [start, end) for the numpy executors, as the kernel reads it there: the
        batch's feature rows, or the words' embedding rows (0 where a node of a model that reads
        inner words has none)."""
        rows = slice(start, end)
        if self.inputs == "features":
            if lin.features is None:
                raise ValueError(f"{type(self).__name__}(inputs='features'): the batch has no features "
                                 "(linearize(trees, features=X))")
            return lin.features[rows]
        words = lin.words[rows]
        if self.no_word is None:
            return self.weights["emb"][words]
        present = self.has_input(lin, start, end)
        return self.weights["emb"][np.where(present, words, 0)] * present[:, None]
