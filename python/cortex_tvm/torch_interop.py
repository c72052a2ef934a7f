"""A compiled recursive model as a `torch.nn.Module` (torch is optional: imported only here).

The module's forward runs the compiled kernel and hands its numpy result to
torch through DLPack: the returned tensor shares the array's memory (the
array is freshly allocated by each call, so nothing else holds it).

Compiled with training=True, the module holds the model's weights as
`nn.Parameter`s named as the model names them (`emb`, `W`, ...), and its
forward is a `torch.autograd.Function` whose backward is the generated one
(`CompiledModel.vjp`): `loss.backward()` fills each parameter's `.grad`.
The compiled model reads the parameters' own memory (`load_weights(copy=False)`): when an
optimizer has changed them (in place, as `optimizer.step()` does), the next forward has the
compiled model check them again (finite, the shapes; not the values `ct.optim.Adagrad` found finite
as it wrote them: `weights.mark_finite`) and make the kernel's padding and packing at its next run;
`module.transform_seconds` is the check's seconds, `module.compiled.transform_seconds` adds the
deferred transforms.  A parameter changed in place
between a forward and its backward is torch's usual error (the autograd node saves them).
Change them as torch counts changes (in place under torch.no_grad(), load_state_dict):
an edit through `.data` leaves a parameter's version as it was, so the kernel keeps the
padded copy of the last check while the backward reads the edit (and a parameter that
`ct.optim.Adagrad` marked finite stays marked: the edit's values go unchecked).
With sparse=True each embedding table's gradient (`Adjoint.word_tables`) is a sparse tensor of
the batch's words' rows, as `torch.nn.Embedding(sparse=True)` makes it.  Otherwise inference
only, and it says so when the module is made.
"""
from __future__ import annotations

import os
import warnings

import numpy as np

from .weights import marked_finite


def _torch():
    try:
        import torch
    except ImportError as err:
        raise ImportError("as_torch() needs PyTorch, which is an optional dependency of cortex_tvm: "
                          "pip install torch (or pip install 'cortex_tvm[torch]')") from err
    return torch


def to_torch(array: np.ndarray):
    """A torch tensor over the same memory as `array` (DLPack); a copy only if the array cannot be
    shared (not C-contiguous or read-only)."""
    torch = _torch()
    if not array.flags.c_contiguous or not array.flags.writeable:
        array = np.array(array, order="C", copy=True)
    return torch.from_dlpack(array)


#: said once per as_torch() call: a fine-tune through this module would not train the encoder
INFERENCE_ONLY = ("as_torch(): inference only. The module has no parameters and its outputs carry no "
                  "gradient, so a loss backpropagated through it does not reach the recursive model's "
                  "weights; to train through it, compile the model with training=True (a model loaded from "
                  "an export: compile it again and load_weights(the exported weights))")
#: said at a sparse module's first training forward in a process of a torch.distributed group
SPARSE_DISTRIBUTED = ("as_torch(sparse=True) in a torch.distributed process group: DistributedDataParallel takes "
                      "sparse gradients only from nn.Embedding modules, and with this module's it fails in the "
                      "backward (\"Cannot access storage of SparseTensorImpl\"); under DDP use as_torch(), whose "
                      "embedding gradient is dense")
#: said when a trained module is made while PyTorch's OpenMP threads spin between its ops
SPINNING_THREADS = ("as_torch(): PyTorch's OpenMP threads spin for milliseconds after each of its parallel ops, on "
                    "the cores the compiled model's threads need next: set OMP_WAIT_POLICY=PASSIVE before torch is "
                    "imported (importing cortex_tvm or tvm imports it: tvm_ffi does where torch is installed), or "
                    "torch.set_num_threads(1) (a TreeLSTM training step at batch 25 ran in 14 ms instead of 24 on a "
                    "2-core Zen 4; docs/training.md)")


def as_torch(compiled, sparse: bool = False):
    """`compiled` (a CompiledModel) wrapped as a torch.nn.Module; forward(trees) -> torch.Tensor.

    forward(trees, all_nodes=True) returns one tensor per tree with its per-node states.
    Compiled with training=True: the weights are parameters and gradients flow (module
    docstring).  Otherwise inference only, and it says so: a UserWarning when the module is made
    (INFERENCE_ONLY).  A trained module warns (SPINNING_THREADS) when it is made if torch runs
    several threads and OMP_WAIT_POLICY is not PASSIVE (read then: set after torch loaded, and
    importing tvm loads it, it silences the warning but not the threads).  torch.save cannot
    pickle compiled code: save `compiled.export(path)` and `ct.load(path)`; a trained module's
    weights are in its `state_dict()`.

    sparse=True (training): the gradient of each embedding table (`emb`; MV-RNN's `embM` too) is
    a `torch.sparse_coo_tensor` holding the batch's words' rows, as `nn.Embedding(sparse=True)`
    gives.  An optimizer then updates those rows, not the whole table: `torch.optim.SGD`,
    `SparseAdam`, or `Adagrad` with the table in a parameter group without weight decay (DGL's
    TreeLSTM recipe: lr 0.1 x the others', no decay), which a sparse gradient needs.  Not under
    DistributedDataParallel, which takes sparse gradients only from nn.Embedding modules: in a
    torch.distributed process group the first training forward warns (SPARSE_DISTRIBUTED).

    Example (training, one Adagrad group; examples/train_sst.py has DGL's two, sparse)::

        module = model.compile(training=True).as_torch()
        classifier = torch.nn.Linear(H, 5)
        optimizer = torch.optim.Adagrad([*module.parameters(), *classifier.parameters()], lr=0.05,
                                        weight_decay=1e-4)
        loss = torch.nn.functional.cross_entropy(classifier(module(trees)), labels)
        loss.backward(); optimizer.step()
    """
    if compiled.adjoint is None:
        if sparse:
            raise ValueError("as_torch(sparse=True): a sparse gradient needs a model compiled with training=True")
        warnings.warn(INFERENCE_ONLY, UserWarning, stacklevel=3)
    elif _torch().get_num_threads() > 1 and os.environ.get("OMP_WAIT_POLICY", "").upper() != "PASSIVE":
        warnings.warn(SPINNING_THREADS, UserWarning, stacklevel=3)
    if sparse and not compiled.adjoint.word_tables:
        raise ValueError(f"as_torch(sparse=True): {compiled.model_name} reads no embedding table by word, "
                         "so no gradient would be sparse")
    return _module_class()(compiled, sparse)


_CLASS = None


def _in_process_group(torch) -> bool:
    return torch.distributed.is_available() and torch.distributed.is_initialized()


def _module_class():
    """The nn.Module class, made once torch is imported (torch stays optional)."""
    global _CLASS
    if _CLASS is not None:
        return _CLASS
    torch = _torch()

    # torch.compile of a model holding this module: Dynamo traced into the linearizer's numpy and
    # stopped ("Expected np.nditer base"); the compiled kernel runs as it is, between compiled graphs
    eager = getattr(getattr(torch, "compiler", None), "disable", lambda function: function)

    class RecursiveFunction(torch.autograd.Function):
        """The compiled forward and the generated backward as one autograd node."""

        @staticmethod
        def forward(ctx, module, trees, sizes, features, *parameters):
            """sizes: None (the roots), or a list that receives each tree's node count (all nodes,
            concatenated: a Function returns tensors, not a list); features: the batch's per-node
            feature rows (a tensor, whose gradient the backward returns) or None."""
            out, pullback = module.compiled.vjp(trees, all_nodes=sizes is not None, features=features)
            ctx.pullback, ctx.names, ctx.sparse = pullback, module.weight_names, module.sparse
            ctx.shapes = [p.shape for p in parameters]
            ctx.save_for_backward(*parameters)       # the pullback reads their memory: torch checks their versions
            ctx.feature_name = None if features is None else module.compiled.adjoint.features.name
            if sizes is None:
                return torch.from_numpy(out)
            sizes.extend(len(rows) for rows in out)
            return torch.from_numpy(np.concatenate(out))

        @staticmethod
        def backward(ctx, d_out):
            ctx.saved_tensors                       # noqa: B018 - raises if an optimizer stepped in between
            grads = ctx.pullback(d_out.detach().cpu().numpy(), word_rows=ctx.sparse)
            d_features = None if ctx.feature_name is None else torch.from_numpy(grads[ctx.feature_name])
            rows = ctx.pullback.word_rows if ctx.sparse else {}
            return (None, None, None, d_features, *(_gradient(grads[name], rows.get(name), shape)
                                                     for name, shape in zip(ctx.names, ctx.shapes)))

    def _gradient(grad, rows, shape):
        """A weight's gradient as torch takes it: the array's memory, or where `rows` are given
        (an embedding's gradient, those rows of it) the sparse tensor of the table's shape."""
        if rows is None:
            return torch.from_numpy(grad)
        return torch.sparse_coo_tensor(torch.from_numpy(rows)[None], torch.from_numpy(grad), shape,
                                       check_invariants=False, is_coalesced=True)

    class RecursiveModule(torch.nn.Module):
        """A compiled cortex_tvm model: forward(trees) -> (len(trees), *state shape) float32 tensor
        holding each root's first state.  Compiled with training=True its weights are parameters
        and gradients flow; otherwise no parameters and no gradient (inference only)."""

        def __init__(self, compiled, sparse=False):
            super().__init__()
            self.compiled = compiled
            self.trainable = compiled.adjoint is not None
            #: whether the embedding tables' gradients are sparse tensors (`as_torch`)
            self.sparse = sparse
            #: seconds the last weight update spent in the compiled model's `load_weights`
            self.transform_seconds = 0.0
            self.weight_names = list(compiled.training_weights or ())
            for name in self.weight_names:
                self.register_parameter(name, torch.nn.Parameter(torch.from_numpy(
                    np.array(compiled.training_weights[name], np.float32))))
            self._seen, self._memory, self._loaded, self._said_distributed = None, None, None, False
            if self.trainable:
                self._sync()

        def _sync(self):
            """Hand changed parameters (an optimizer step, load_state_dict) to the compiled model,
            or all of them where it holds another's weights (a second module, a load_weights):
            where each kept its memory (the same data, shape, strides and dtype, contiguous), the
            compiled model checks the changed ones again (`weights_changed`) but those marked finite
            (`weights.marked_finite`); else it takes them anew."""
            parameters = self._parameters.values()
            versions = [(p.data_ptr(), p._version) for p in parameters]
            loaded = self.compiled.training_weights is self._loaded
            if versions == self._seen and loaded:
                return
            memory = [(p.dtype, p.shape, p.stride(), p.is_contiguous()) for p in parameters]
            # (a contiguous parameter's array in the compiled model is its memory, not a copy)
            if (loaded and memory == self._memory and all(m[3] for m in memory)
                    and all(now[0] == then[0] for now, then in zip(versions, self._seen))):
                # (those ct.optim.Adagrad found finite as it wrote them need no check: `weights.mark_finite`)
                self.compiled._weights_changed(
                    [name for name, now, then in zip(self.weight_names, versions, self._seen) if now != then],
                    [name for name, p in self._parameters.items() if marked_finite(p)])
            else:
                other = next((name for name, p in self._parameters.items() if p.dtype != torch.float32), None)
                if other is not None:                   # (module.double(), .half(), .to(dtype))
                    raise TypeError(f"as_torch module: parameter {other!r} is {self._parameters[other].dtype}; the "
                                    "compiled model computes in float32 (module.float() makes it so again)")
                self.compiled.load_weights(dict(self._parameters), copy=False)
            # (plain attributes, past nn.Module.__setattr__'s checks for parameters and modules)
            self.__dict__.update(transform_seconds=self.compiled.transform_seconds, _seen=versions,
                                 _memory=memory, _loaded=self.compiled.training_weights)

        @eager
        def forward(self, trees, all_nodes: bool = False, features=None):
            """features: the batch's per-node feature rows for a model that reads them (a tensor,
            (nodes, F), in the order all_nodes lists nodes); trained, its gradient flows back to
            whatever made it (an encoder)."""
            if self.trainable:
                self._sync()
                if torch.is_grad_enabled():
                    if self.sparse and not self._said_distributed and _in_process_group(torch):
                        self._said_distributed = True
                        warnings.warn(SPARSE_DISTRIBUTED, UserWarning, stacklevel=2)
                    sizes = [] if all_nodes else None
                    out = RecursiveFunction.apply(self, trees, sizes, features, *self._parameters.values())
                    return list(torch.split(out, sizes)) if all_nodes else out
            # inference (or under torch.no_grad()): the kernel alone, nothing saved for a backward
            if all_nodes:
                return [to_torch(states) for states in self.compiled(trees, all_nodes=True, features=features)]
            return to_torch(self.compiled(trees, features=features))

        def extra_repr(self):
            c = self.compiled
            mode = "training" if self.trainable else "inference only"
            return f"{c.model_name}, recipe={c.recipe_name!r}, target={c.target.kind.name}, {mode}"

        def __reduce__(self):
            raise TypeError("a cortex_tvm module holds compiled code, which torch.save cannot pickle: "
                            "save it with compiled.export(path) and load it with cortex_tvm.load(path) "
                            "(then .as_torch() again), or save module.state_dict()")

    RecursiveModule.__qualname__ = RecursiveModule.__name__ = "RecursiveModule"
    _CLASS = RecursiveModule
    return _CLASS
