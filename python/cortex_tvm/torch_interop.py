"""A compiled recursive model as a `torch.nn.Module` (torch is optional: imported only here).

The module's forward runs the compiled kernel and hands its numpy result to
torch through DLPack: the returned tensor shares the array's memory (the
array is freshly allocated by each call, so nothing else holds it).
Inference only: no gradients flow through the compiled kernel.
"""
from __future__ import annotations

import warnings

import numpy as np


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
                  "weights; train a PyTorch copy of the model and load its state_dict instead")


def as_torch(compiled):
    """`compiled` (a CompiledModel) wrapped as a torch.nn.Module; forward(trees) -> torch.Tensor.

    Inference only, and it says so: a UserWarning when the module is made (INFERENCE_ONLY).
    forward(trees, all_nodes=True) returns one tensor per tree with its per-node states.
    torch.save cannot pickle compiled code: save `compiled.export(path)` and `ct.load(path)`.

    Example::

        module = ct.compile(cell, weights=w).as_torch()
        classifier = torch.nn.Linear(H, 5)
        logits = classifier(module(trees))       # (len(trees), 5)
    """
    warnings.warn(INFERENCE_ONLY, UserWarning, stacklevel=3)
    return _module_class()(compiled)


_CLASS = None


def _module_class():
    """The nn.Module class, made once torch is imported (torch stays optional)."""
    global _CLASS
    if _CLASS is not None:
        return _CLASS
    torch = _torch()

    class RecursiveModule(torch.nn.Module):
        """A compiled cortex_tvm model: forward(trees) -> (len(trees), *state shape) float32 tensor
        holding each root's first state (inference only: no parameters, no gradient)."""

        def __init__(self, compiled):
            super().__init__()
            self.compiled = compiled

        def forward(self, trees, all_nodes: bool = False):
            if all_nodes:
                return [to_torch(states) for states in self.compiled(trees, all_nodes=True)]
            return to_torch(self.compiled(trees))

        def extra_repr(self):
            c = self.compiled
            return f"{c.model_name}, recipe={c.recipe_name!r}, target={c.target.kind.name}, inference only"

        def __reduce__(self):
            raise TypeError("a cortex_tvm module holds compiled code, which torch.save cannot pickle: "
                            "save it with compiled.export(path) and load it with cortex_tvm.load(path) "
                            "(then .as_torch() again)")

    RecursiveModule.__qualname__ = RecursiveModule.__name__ = "RecursiveModule"
    _CLASS = RecursiveModule
    return _CLASS
