"""What every model shares: weights (seeded init, validated loading), lowering, compiling.

A model subclass says three things: its weight shapes, its RA program, and a
numpy level-batched executor (the baseline the demo and benchmarks compare
against).  Everything else (lowering, scheduling, building) is generic.
"""
from __future__ import annotations

import numpy as np

from .. import linearize as _linearize
from .. import lower as _lower


def _to_numpy(name, value):
    """numpy array from a numpy array or a torch tensor (torch is optional)."""
    if hasattr(value, "detach") and hasattr(value, "cpu"):       # a torch.Tensor
        value = value.detach().cpu().numpy()
    if not isinstance(value, np.ndarray):
        raise TypeError(f"weight {name!r}: expected a numpy array or torch tensor, got {type(value).__name__}")
    return value


def check_sizes(**sizes):
    """ValueError unless every size is a positive int."""
    for name, value in sizes.items():
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")


def sigmoid(x):
    """numpy logistic function, for the models' level-batched executors."""
    return 1.0 / (1.0 + np.exp(-x))


def checked_weights(weights, expected: dict, aliases: dict, who: str) -> dict:
    """Validated float copies of `weights` (numpy arrays or torch tensors, names or aliases).

    expected: name -> (shape, dtype).  ValueError for missing, extra, wrongly
    shaped or non-finite weights; TypeError for a non-dict or a wrong dtype.
    """
    if not hasattr(weights, "items"):
        raise TypeError(f"{who}: expected a dict of arrays, got {type(weights).__name__}")
    given = {aliases.get(k, k): v for k, v in weights.items()}
    missing, extra = sorted(set(expected) - set(given)), sorted(set(given) - set(expected))
    if missing:
        raise ValueError(f"{who}: missing weights {missing} (expected {sorted(expected)})")
    if extra:
        raise ValueError(f"{who}: unexpected weights {extra} (expected {sorted(expected)})")
    out = {}
    for name, (shape, dtype) in expected.items():
        w = _to_numpy(name, given[name])
        if w.dtype != np.dtype(dtype):
            raise TypeError(f"{who}: weight {name!r}: dtype {w.dtype}, expected {dtype} "
                            f"(use .astype(np.{dtype}))")
        if tuple(w.shape) != tuple(shape):
            raise ValueError(f"{who}: weight {name!r}: shape {tuple(w.shape)}, expected {tuple(shape)}")
        if not np.all(np.isfinite(w)):
            raise ValueError(f"{who}: weight {name!r}: contains NaN or infinity")
        out[name] = np.array(w, order="C", copy=True)       # later edits by the caller do not leak in
    return out


class Model:
    """Base of the model zoo.  Subclasses define `weight_shapes`, `program`, `numpy_forward`."""

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
        """Word ids must lie in [0, vocab_bound); None when the model reads no words."""
        return getattr(self, "vocab_size", None)

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
        """
        if dump is not None:
            return _lower.lower(self.program, specialize_leaves, dump=dump)
        cache = self.__dict__.setdefault("_lowered", {})
        if specialize_leaves not in cache:
            cache[specialize_leaves] = _lower.lower(self.program, specialize_leaves)
        return cache[specialize_leaves]

    def compile(self, target="llvm", schedule=None, tuning_log=None, bounds_check=False):
        """Lower, schedule and build; the result is called on a list of trees.

        schedule: a recipe name from `cortex_tvm.schedules` (default: the best
        for this model and target) or a callable taking a RecSchedule.
        bounds_check=True: build with TVM's bound-check pass config and validate index arrays in run().
        The weights loaded now are the ones the compiled model uses.
        """
        from ..build import compile_model
        return compile_model(self, target=target, schedule=schedule, tuning_log=tuning_log,
                             bounds_check=bounds_check)

    def as_relax(self, target="llvm"): from ..relax import as_relax; return as_relax(self, target)  # noqa: E704,E702

    #: whether the model reads words on inner nodes (x = 0 at a node without a word)
    reads_inner_words = False

    @property
    def no_word(self):
        """What `lin.words` holds at a node without a word: vocab_bound for models that read
        words on inner nodes (their node input is `optional`), None otherwise."""
        return self.vocab_bound if self.reads_inner_words else None

    def linearize(self, trees, pad=1) -> _linearize.Linearized:
        return _linearize.linearize(trees, self.max_children, pad=pad, vocab_size=self.vocab_bound,
                                    allow_shared=self.program.spec.kind == "dag", no_word=self.no_word)

    def reference(self, trees) -> np.ndarray:
        """Root states from the numpy level-batched executor (the demo's baseline)."""
        lin = self.linearize(trees)
        return self.numpy_forward(lin)[0][lin.roots]

    def flops(self, lin: _linearize.Linearized) -> float:
        """Useful multiply-add FLOPs for one batch (for GFLOP/s reports); 0 if unknown."""
        return 0.0


class WordModel(Model):
    """A model reading word embeddings: hidden size H, vocabulary V, embedding size E (H unless given)."""

    def __init__(self, hidden_size: int, vocab_size: int, embed_size: int | None = None, seed: int = 0):
        embed_size = hidden_size if embed_size is None else embed_size
        check_sizes(hidden_size=hidden_size, vocab_size=vocab_size, embed_size=embed_size)
        self.hidden_size, self.vocab_size, self.embed_size = hidden_size, vocab_size, embed_size
        super().__init__(seed)
