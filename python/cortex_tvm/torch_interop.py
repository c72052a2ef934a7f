"""A compiled recursive model as a `torch.nn.Module` (torch is optional: imported only here).

The module's forward runs the compiled kernel and hands its numpy result to
torch through DLPack: the returned tensor shares the array's memory (the
array is freshly allocated by each call, so nothing else holds it).
Inference only: no gradients flow through the compiled kernel.
"""
from __future__ import annotations

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


def as_torch(compiled):
    """`compiled` (a CompiledModel) wrapped as a torch.nn.Module; forward(trees) -> torch.Tensor.

    Example::

        module = ct.compile(cell, weights=w).as_torch()
        classifier = torch.nn.Linear(H, 5)
        logits = classifier(module(trees))       # (len(trees), 5)
    """
    torch = _torch()

    class RecursiveModule(torch.nn.Module):
        """A compiled cortex_tvm model: forward(trees) -> (len(trees), *state shape) float32 tensor
        holding each root's first state (inference only)."""

        def __init__(self):
            super().__init__()
            self.compiled = compiled

        def forward(self, trees):
            return to_torch(self.compiled(trees))

        def extra_repr(self):
            return f"{compiled.model_name}, recipe={compiled.recipe_name!r}, target={compiled.target.kind.name}"

    return RecursiveModule()
