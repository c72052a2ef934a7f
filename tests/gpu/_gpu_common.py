"""Shared helpers of the GPU tests: compile TreeFC / TreeLSTM for CUDA with either kernel strategy."""
from __future__ import annotations

import re

import cortex_tvm as ct
from cortex_tvm import recipes

H = 64
MODELS = ("TreeFC", "TreeLSTM")
STRATEGIES = ("single", "per_level")


def recipe(model_name: str, strategy: str):
    """The shipped CUDA recipe with the kernel-structure knobs set for `strategy`."""
    r = recipes.shipped()[f"{model_name.lower()}_cuda"]
    if strategy == "per_level":
        return r.with_knobs(per_level=True, persistent=False)
    return r.with_knobs(per_level=False, persistent=True)


def compile_cuda(model_name: str, strategy: str, vocab_size: int = 100, hidden_size: int = H):
    model = getattr(ct.models, model_name)(hidden_size=hidden_size, vocab_size=vocab_size)
    return model, model.compile(target="cuda", schedule=recipe(model_name, strategy))


def kernel_definitions(cuda_source: str) -> list:
    """Names of the __global__ functions defined (not just declared) in CUDA source."""
    return re.findall(r"__global__\s+void\s+(?:__launch_bounds__\(\d+\)\s+)?(\w+)\([^;{]*\)\s*\{", cuda_source)
