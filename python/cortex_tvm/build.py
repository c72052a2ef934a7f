"""Targets and compilation: a scheduled PrimFunc -> a runtime module, cached per process."""
from __future__ import annotations

import threading

import tvm
import tvm_ffi
from tvm.target import Target, codegen

from . import config

_cache: dict = {}
_cache_lock = threading.Lock()
_compiles = 0


def compile_count() -> int:
    """How many times `tvm.compile` ran in this process (the cache hides repeats)."""
    return _compiles


def make_target(target) -> Target:
    """A TVM Target from "llvm", "cuda", a dict or a Target.

    "llvm" means this machine's CPU with all its cores (TVM's "native" falls
    back to a generic CPU in this version, so the CPU is detected here).
    """
    if isinstance(target, Target):
        return target
    if isinstance(target, dict):
        return Target(target)
    if target == "llvm":
        return Target({"kind": "llvm", "mcpu": codegen.llvm_get_system_cpu(),
                       "num-cores": config.load().num_threads})
    if target == "cuda":
        return Target({"kind": "cuda", "arch": "sm_90"}, host={"kind": "llvm"})
    if isinstance(target, str):
        raise ValueError(f"unknown target {target!r}: use 'llvm', 'cuda', a dict or a tvm.target.Target")
    raise TypeError(f"target must be a string, dict or tvm.target.Target, got {type(target).__name__}")


def build_module(mod: tvm.IRModule, target: Target):
    """tvm.compile with an in-process cache keyed by the IR's structural hash and the target."""
    global _compiles
    key = (tvm_ffi.structural_hash(mod), str(target))
    with _cache_lock:
        if key in _cache:
            return _cache[key]
        executable = tvm.compile(mod, target=target)
        _compiles += 1
        _cache[key] = executable
        return executable


def compile_model(model, target="llvm", schedule=None, tuning_log=None):
    """model -> lowered -> scheduled -> built -> CompiledModel."""
    from .runtime import CompiledModel
    from .schedule import RecSchedule
    from . import recipes

    tgt = make_target(target)
    if tuning_log is not None:
        raise NotImplementedError("tuning logs arrive with cortex_tvm.tune")
    lowered = model.lower()
    rs = RecSchedule(lowered)
    recipe = recipes.resolve(model, tgt, schedule)
    recipe.apply(rs)
    executable = build_module(rs.mod, tgt)
    return CompiledModel(model, lowered, executable, tgt, recipe)
