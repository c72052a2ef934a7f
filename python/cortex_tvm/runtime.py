"""The executor: linearize trees, run the compiled kernel(s), gather the results."""
from __future__ import annotations

import threading
import time

import numpy as np
import tvm

from . import export as _export, linearize as _linearize, torch_interop, vjp as _vjp
from .integrity import cannot_run_here, source_of  # noqa: F401 (compiler and tests import cannot_run_here here)
# ALIGN, aligned and model_weight_arrays: re-exported, tests read them here
from .kernel_args import ALIGN, aligned, aligned_empty, kernel_weights, launch, model_weight_arrays  # noqa: F401
from .call_args import NO_TREES, one_input
from .node_features import check_slot_rows
from .plan import CHECK_FUNC, kernel_names
from .weights import check_finite, check_rows, checked_weights, pad_blocks

_INT32 = np.dtype(np.int32)


class _Workspace(threading.local):
    """Per-thread state buffers, grown to the largest batch seen and reused."""

    def __init__(self):
        self.states = None


class CompiledModel:
    """A compiled recursive model: `compiled(trees)` -> root states, numpy (B, *state shape).

    `weights` are the model's (name -> array, the model's layout; `signature.model_weights`):
    the parameter transforms run on them here, once.  Each thread gets its own state
    buffers, so one CompiledModel can be called from several threads at once
    (docs/threads.md).
    """

    #: validate a Linearized's index arrays in run() (set by compile(bounds_check=True))
    bounds_check = False
    #: the backward pass (`adjoint.Adjoint`, from compile(training=True)); None: inference only
    adjoint = None
    #: the weights the backward differentiates, in the user's sizes (name -> float32 array)
    training_weights = None
    #: seconds the last `load_weights` spent validating, padding and transforming the weights (with
    #: training=True: checking and copying, plus the padding and transforms once they run)
    transform_seconds = 0.0

    def __init__(self, signature, executable, target, plan, weights, *, vocab_bound, model_name,
                 aliases=None, recipe_name="custom", state_shapes=None, lowered=None, trace=(),
                 weight_padding=None):
        self.model_name = model_name
        #: other names of the weights (PyTorch's), kept for load(path, weights=state_dict)
        self.aliases = dict(aliases or {})
        self.signature, self.executable, self.target, self.plan = signature, executable, target, plan
        #: the Lowered program when compiled in this process (None for a loaded model)
        self.lowered = lowered
        #: the schedule applied, as replayable steps: the record of what was compiled
        self.trace = [dict(step) for step in trace]
        self.recipe_name = recipe_name
        self._max_children = signature.max_children
        self._shared_nodes = signature.kind == "dag"     # DAG: a shared node gets one slot
        self._vocab_bound = vocab_bound
        self._states = signature.states
        #: the states' shapes as the user's model has them; the kernel's may be padded
        #: to the vector width (policy/padding.py), and the padding is sliced off here
        self.state_shapes = tuple(tuple(int(d) for d in shape) for shape in state_shapes) if state_shapes \
            else tuple(shape for _, shape, _ in self._states)
        self._unpad = tuple(slice(0, d) for d in self.state_shapes[0])
        #: weight -> its padded axes (axis, blocks, size, padded size) when the kernel runs at sizes
        #: rounded up (`padding.padded`): `load` pads weights given in the user's sizes the same way
        self.weight_padding = {name: [tuple(p) for p in pads] for name, pads in (weight_padding or {}).items()}
        #: the model's weights (exported as they are) and the kernel's arguments made from them
        self.model_weights = weights
        #: the word tables whose rows each batch checks before it runs (`load_weights`)
        self._rows_unchecked = frozenset()
        self._upload_lock = threading.RLock()
        #: why this CPU cannot run the code (compiled for another one, e.g. AVX-512 code on an AVX2
        #: host, to inspect or export it), else None: nothing of it runs here, not even the transforms
        self._foreign = None if target.kind.name == "cuda" else cannot_run_here(target)
        self._weights = None if target.kind.name == "cuda" or self._foreign else \
            kernel_weights(executable, signature, weights)
        self._workspace = _Workspace()
        self._functions = [executable[n] for n in kernel_names(plan)]
        #: the compiled bounds check (`check_kernel`), where the module has one (CPU, and exports
        #: made since it exists); else run(lin) checks in numpy only
        self._check_kernel = executable[CHECK_FUNC] if executable.mod.implements_function(CHECK_FUNC) else None
        #: its scalar arguments, fixed for this kernel; None where it does not apply (no compiled
        #: check, or an unrolled layout, whose extra rule only `check_bounds` knows)
        no_word = signature.no_word
        self._check_scalars = None if self._check_kernel is None or plan.unroll is not None or self._foreign else (
            vocab_bound or 0, int(no_word is not None), no_word or 0, plan.node_tile, int(bool(plan.hoisted)))

    @property
    def precision(self) -> str:
        """"bf16" when the kernel reads weights stored as bfloat16 (`plan.bf16_weights`), else "fp32"."""
        return "bf16" if self.plan.bf16_weights else "fp32"

    def linearize(self, trees, features=None) -> _linearize.Linearized:
        """Validate and lay out a batch the way this kernel expects (padding, batching); `features`
        for a model that reads per-node features (see `__call__`)."""
        return self.signature.layout(trees, self.plan.node_tile, self.plan.dynamic_batching, self._vocab_bound,
                                     self.plan.unroll, features)

    def linearize_parents(self, parents, words, features=None) -> _linearize.Linearized:
        """`linearize` for a forest given as arrays: node i's parent (-1 at a root) and word (-1:
        none); node_slots in node order (`linearize_arrays.linearize_parents`)."""
        return self.signature.layout_parents(parents, words, self.plan.node_tile, self.plan.dynamic_batching,
                                             self._vocab_bound, self.plan.unroll, features)

    def _state_buffers(self, num_slots):
        ws = self._workspace
        if ws.states is None or ws.states[0].shape[0] < num_slots:
            capacity = max(1024, 1 << (num_slots - 1).bit_length())
            # zeros: slot 0 is the null node and is never written by the kernel
            ws.states = [aligned_empty((capacity,) + shape, dtype) for _, shape, dtype in self._states]
            for state in ws.states:
                state.fill(0)
        return [s[:num_slots] for s in ws.states]

    def run(self, lin: _linearize.Linearized, check: bool = True):
        """Run the kernel on linearized trees; returns (root states, per-slot state buffers).

        `lin` is validated first (`linearize.check_bounds`: every index inside its buffer,
        levels in whole node tiles, children in earlier levels, leaf words in the vocabulary),
        so hand-made or edited arrays raise ValueError instead of reading out of bounds;
        check=False skips that for arrays that come straight from `linearize` (as `__call__`
        does).  The state buffers belong to this thread's workspace: copy what you keep.
        """
        if self._foreign:
            raise ValueError(self._foreign)
        if check or self.bounds_check:
            self.check(lin)
        if self.signature.node_features:
            check_slot_rows(lin, *self.signature.node_features[0])
        if self.target.kind.name == "cuda":
            return self._run_cuda(lin)
        weights = self._weights                    # (read once: another thread may load new ones)
        if weights is None:
            weights = self._settle_weights()
        states = self._state_buffers(lin.num_slots)
        _, shape, dtype = self._states[0]
        out = np.empty((len(lin.roots),) + shape, dtype)
        launch(self._functions, self.signature.structure_args(lin) + [*weights, *states, out],
               lin, self.signature, self.plan)
        return self._visible(out), states

    @property
    def model_weights(self) -> dict:
        """The model's weights in the kernel's sizes (exported as they are)."""
        self._settle_weights()
        return self._model_weights

    @model_weights.setter
    def model_weights(self, arrays):
        self._model_weights, self._pending = arrays, None

    def _settle_weights(self):
        """Pad and transform the weights a training model's `load_weights` left for the kernel;
        returns the kernel's weight arguments (None on a GPU, uploaded at its next call, or on a
        CPU that cannot run the code)."""
        with self._upload_lock:
            if self._pending is not None:
                start, user, reads = time.perf_counter(), self._pending, self._kernel_reads()
                check_rows(user, dict.fromkeys(reads), "run", self._rows_unchecked & set(reads))
                self._rows_unchecked -= set(reads)      # checked whole: a vjp need not check its rows
                self._model_weights = {name: pad_blocks(user[name], self.weight_padding.get(name, ()))
                                       for name in reads}
                if self.target.kind.name != "cuda" and not self._foreign:
                    self._weights = kernel_weights(self.executable, self.signature, self._model_weights)
                self._pending = None
                self.transform_seconds += time.perf_counter() - start
            return self._weights

    def _kernel_reads(self) -> dict:
        return _export.user_weight_shapes(self.signature, self.weight_padding)

    def check(self, lin: _linearize.Linearized) -> None:
        """ValueError unless `lin` is safe for this kernel (see `run`).

        The compiled check answers first (about 1 us); when it finds a fault, or cannot take
        the arrays, `linearize.check_bounds` runs and raises the ValueError that names it."""
        status = self.compiled_check_status(lin)
        if status == 0:
            return
        self._check_in_numpy(lin)
        if status is not None:
            raise ValueError(f"run: the arrays break an invariant of the kernel (compiled check code {status}, "
                             "see check_kernel.py)")

    def compiled_check_status(self, lin):
        """The compiled check's answer on `lin` (`check_kernel`: 0 valid, else the code of the rule
        that failed), or None where it does not apply: a module without it, an unrolled layout
        (whose extra rule only `check_bounds` knows), or arrays it cannot read."""
        if self._check_scalars is None or not self._checkable(lin):
            return None
        status = np.zeros(1, np.int32)
        self._check_kernel(lin.children, lin.num_children, lin.words, lin.level_offsets, lin.roots, status,
                           *self._check_scalars)
        return int(status[0])

    def _checkable(self, lin) -> bool:
        """Whether the compiled check may read `lin`'s arrays: int32, C-contiguous, shapes that agree.
        (Called on every run(lin): plain attribute tests, no generator.)"""
        if not isinstance(lin, _linearize.Linearized):
            return False
        arrays = (lin.children, lin.num_children, lin.words, lin.level_offsets, lin.roots)
        for a in arrays:
            # the canonical int32 dtype object (another one, e.g. byte-swapped, goes to numpy);
            # TVM takes a zero-size array's strides for a non-compact array: numpy checks those
            if type(a) is not np.ndarray or a.dtype is not _INT32 or not a.flags.c_contiguous or not a.size:
                return False
        children, num_children, words, level_offsets, roots = arrays
        return (children.ndim == 2 and children.shape[1] == self._max_children
                and num_children.shape == words.shape == children.shape[:1]
                and level_offsets.ndim == 1 and level_offsets.shape[0] >= 2 and roots.ndim == 1)

    def _check_in_numpy(self, lin) -> None:
        _linearize.check_bounds(lin, self._max_children, self._vocab_bound, self.signature.no_word,
                                node_tile=self.plan.node_tile, leaf_words=bool(self.plan.hoisted),
                                unroll=self.plan.unroll)

    def _visible(self, rows):
        """Rows of the first state without the kernel's padding (a copy only when padded)."""
        if rows.shape[1:] == self.state_shapes[0]:
            return rows
        return np.ascontiguousarray(rows[(slice(None),) + self._unpad])

    def _run_cuda(self, lin: _linearize.Linearized):
        """run() on a CUDA device: arrays are copied in, the kernels launched, results copied back."""
        device = tvm.cuda(0)
        if not device.exist:
            raise RuntimeError("no CUDA device: this model was compiled for target 'cuda' but no GPU is "
                               "visible to TVM (tvm.cuda(0).exist is False); compiled.inspect_source() "
                               "shows the generated CUDA code")

        def put(array):
            return tvm.runtime.tensor(np.ascontiguousarray(array), device=device)

        with self._upload_lock:         # uploaded and transformed on the device once, by one thread
            if self._weights is None:
                self._weights = kernel_weights(self.executable, self.signature, self.model_weights, put)
            weights = self._weights                       # (read once: another thread may load new ones)
        states = [put(np.zeros((lin.num_slots,) + shape, dtype)) for _, shape, dtype in self._states]
        _, shape, dtype = self._states[0]
        out = put(np.empty((len(lin.roots),) + shape, dtype))
        launch(self._functions, self.signature.structure_args(lin, put) + [*weights, *states, out],
               lin, self.signature, self.plan)
        device.sync()
        return self._visible(out.numpy()), [s.numpy() for s in states]

    def __call__(self, trees=NO_TREES, all_nodes: bool = False, *, parents=None, words=None, features=None):
        """Root state of each tree, (B, *state shape); with all_nodes=True, a list with each
        tree's per-node states in `cortex_tvm.data.postorder` order.  Or a forest as arrays,
        parents= (node i's parent, -1 at a root) and words= (-1: none), no Nodes built: the
        roots in the order they appear; all_nodes=True gives one (n, *shape) array, node order.

        features=: for a model that reads per-node feature vectors (`inputs="features"`,
        `ra.node_features`), a float32 (nodes, F) array (or a torch tensor, or one array per
        tree), one row per node in the order all_nodes=True lists them: with trees, each tree
        in post-order (a DAG model's in `data.dag_postorder`), trees in batch order; with
        parents=, node order (words= may be left out).
        Every row is checked for shape, dtype and NaN/inf before the kernel runs."""
        one_input(trees, parents, words, "")
        lin = (self.linearize(trees, features) if parents is None
               else self.linearize_parents(parents, words, features))
        out, states = self.run(lin, check=self.bounds_check)      # linearize's arrays are valid
        if not all_nodes:
            return out
        rows = self._visible(states[0][lin.node_slots])
        return rows if parents is not None else np.split(rows, np.cumsum(lin.tree_sizes)[:-1])

    # -- training ------------------------------------------------------------------------
    def load_weights(self, weights, *, copy: bool = True) -> "CompiledModel":
        """Use `weights` (name -> numpy array or torch tensor, the user's sizes, float32) from the
        next call on, without recompiling: they are checked, padded to the kernel's sizes, and the
        parameter transforms (packing, leaf tables) run again; `transform_seconds` says how long
        that took.  A model compiled with training=True takes all of its weights (the backward
        reads them too), an embedding table's values checked row by row as batches read them (a
        whole table at each optimizer step costs as the vocabulary); otherwise the ones the
        kernel reads.  Returns self.

        With training=True the padding and the transforms wait for the kernel's next run (their
        seconds are added to `transform_seconds` then): a `vjp` whose forward is the backward's
        own reads the weights as given, so a step whose batch takes that forward
        (`LevelPass.forward_pays`: every batch on 1 or 2 cores) makes none of them
        (`as_torch` calls this after every optimizer step).  copy=False: the model keeps the
        given arrays (C-contiguous float32 ones: no copy), which the backward reads at every call and
        the kernel pads at its next run; change them only before another load_weights (`as_torch`)."""
        start = time.perf_counter()
        kernel_reads = self._kernel_reads()
        expected = kernel_reads if self.adjoint is None else \
            {name: (array.shape, "float32") for name, array in self.training_weights.items()}
        later = frozenset(self.adjoint.word_tables) if self.adjoint is not None else frozenset()
        user = checked_weights(weights, expected, self.aliases, "load_weights", copy, later)     # validated
        with self._upload_lock:
            self._pending, self._weights, self._rows_unchecked = user, None, later
            if self.adjoint is not None:                     # padded and transformed when next needed
                self.training_weights = user
            else:
                self._settle_weights()
        self.transform_seconds = time.perf_counter() - start
        return self

    def weights_changed(self, names=None) -> "CompiledModel":
        """A training model's weights given with `load_weights(copy=False)` were changed in place (an
        optimizer's step): check `names` (all by default) finite again, and make the padding and
        the transforms at the kernel's next run, as `load_weights` would without taking the arrays
        again (`as_torch` calls this where its parameters kept their memory).  Returns self."""
        return self._weights_changed(names, ())

    def _weights_changed(self, names, finite) -> "CompiledModel":
        """`weights_changed`, where the weights named in `finite` are known finite and are not checked,
        an embedding table's rows not at each batch either: `as_torch`'s hand-over of the parameters that
        `optim.Adagrad`'s loops found finite as they wrote them (`weights.marked_finite`)."""
        start = time.perf_counter()
        if self.adjoint is None:
            raise ValueError("weights_changed: for a model compiled with training=True (load_weights otherwise)")
        user, later = self.training_weights, frozenset(self.adjoint.word_tables)
        for name in user if names is None else names:
            if name not in later and name not in finite:
                check_finite(name, user[name], "weights_changed")
        with self._upload_lock:
            self._pending, self._weights, self._rows_unchecked = user, None, later.difference(finite)
        self.transform_seconds = time.perf_counter() - start
        return self

    def vjp(self, trees=NO_TREES, all_nodes: bool = False, *, parents=None, words=None, features=None):
        """The forward on `trees` and its pullback: ``out, vjp = compiled.vjp(trees)``, then
        ``grads = vjp(d_out)`` maps every weight's name to the gradient of sum(d_out * out) with
        respect to it, in the user's sizes (the kernel's padding removed).  A model that reads
        per-node features takes them as `__call__` does (features=X), and `grads` also holds
        their gradient under the feature input's name ("features" for the zoo and traced cells),
        (nodes, F) in X's row order: what an encoder that made X backpropagates.
        `out` is what `compiled(trees, all_nodes)` returns: the roots' first state (B, *shape),
        or with all_nodes=True one (nodes, *shape) array per tree, postorder; `d_out` has the
        same shapes (a list, or the arrays concatenated).  A forest as arrays (parents=,
        words=) is taken as `compiled(parents=..., words=...)` takes it.  The forward is the
        backward's own (`adjoint.Adjoint`) where the batch's levels are large enough for the
        cores (`LevelPass.forward_pays`), which keeps every node's tensors for the pullback (a
        later `vjp` on the thread overwrites them: the pullback then recomputes them), else the
        kernel's.  Needs compile(training=True).  ``vjp.word_rows``: each embedding table's
        (`adjoint.word_tables`) rows its gradient can be nonzero on (the batch's words, sorted);
        ``vjp(d_out, word_rows=True)`` gives those rows of its gradient only."""
        return _vjp.vjp(self, trees, all_nodes, parents, words, features)

    def as_torch(self, sparse: bool = False):
        """This model as a `torch.nn.Module` whose forward(trees) returns a torch.Tensor (DLPack, no copy;
        ImportError without torch; `cortex_tvm.torch_interop`).  With training=True the weights are its
        `nn.Parameter`s, `loss.backward()` fills their `.grad`; sparse=True: an embedding's `.grad` is sparse.
        Example: ``logits = torch.nn.Linear(H, 5)(compiled.as_torch()(trees))``."""
        return torch_interop.as_torch(self, sparse)

    def export(self, path) -> str:
        """Write the kernel library, weights and everything needed to run it to the directory
        `path`; `cortex_tvm.load(path)` runs it in another process without compiling."""
        return _export.export(self, path)

    def __reduce__(self):       # (pickle, copy.deepcopy: TVM's own error was "llvm is not binary serializable")
        raise TypeError("a CompiledModel holds compiled code, which pickle cannot copy: write it with "
                        "compiled.export(path) and read it with cortex_tvm.load(path) where it is needed")

    def inspect_source(self) -> str:
        """Generated source: CUDA for a GPU target, LLVM IR for the CPU (ValueError for loaded code)."""
        return source_of(self.executable)


def load(path, weights=None) -> CompiledModel:
    """A CompiledModel from a directory written by `CompiledModel.export`; compiles nothing.

    Every file is checked against the digests export recorded, and the CPU against the
    instruction sets the code needs, before the library is loaded: a damaged or foreign
    export is a ValueError, never a crash.  weights: see `export.read`.
    """
    return CompiledModel(**_export.read(path, weights))
