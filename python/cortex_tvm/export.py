"""Export a CompiledModel to a directory; load it in another process without compiling.

    compiled.export("model_dir")                  # lib.so + meta.json + weights.npz
    compiled = cortex_tvm.load("model_dir")       # no TVM compilation, no model object needed
    compiled = cortex_tvm.load("model_dir", weights={...})   # other weights, same layout

The directory holds:
  lib.so        the kernel(s), from TVM's `export_library`
  meta.json     format version, model class, recipe and the applied trace, target, runtime
                plan, the kernel signature (`signature.KernelSignature`: per-node inputs,
                children, weights in the model's layout before packing, states, structure
                kind), the visible state shapes, vocabulary bound, weight aliases, versions
  weights.npz   the model's weights in the model's layout (`KernelSignature.model_weights`); the
                module's parameter transforms (packing, leaf tables) run on them at load
Each file is written to a temporary name and renamed into place; meta.json comes last.
meta.json also records each file's size and sha256, its own digest, and the CPU the code
was compiled for (triple, mcpu, mattr, LLVM features): `load` checks all of them before it
maps the library (`integrity`), so a damaged export or a foreign CPU is a ValueError, not
a SIGBUS or SIGILL.
"""
from __future__ import annotations

import dataclasses
import io
import json
import os
import tempfile
import zipfile

import numpy as np
import tvm
from tvm.target import Target

from . import amx_bf16, integrity
from .plan import RuntimePlan
from .signature import KernelSignature
from .version import __version__
from .weights import checked_weights, pad_blocks, unpadded_shape

#: 4: model-layout weights and the parameter transform function; 3: the kernel signature and the
#: applied trace; 2: file digests, meta seal, CPU features
FORMAT = 4
LIB, META, WEIGHTS = "lib.so", "meta.json", "weights.npz"


def _atomic(path, write) -> dict:
    """Write through a temporary file renamed into place; returns the written file's digest."""
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=os.path.splitext(path)[1], dir=os.path.dirname(path))
    os.close(fd)
    try:
        write(tmp)
        digest = integrity.file_digest(tmp)
        os.replace(tmp, path)
        return digest
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def _tuples(value):
    return tuple(_tuples(v) for v in value) if isinstance(value, list) else value


def export(compiled, path) -> str:
    """Write `compiled` to the directory `path` (created if needed); returns the path."""
    path = os.fspath(path)
    if os.path.exists(path) and not os.path.isdir(path):
        raise ValueError(f"export: {path!r} exists and is not a directory")
    os.makedirs(path, exist_ok=True)
    signature = compiled.signature
    meta = {
        "format": FORMAT,
        "model": compiled.model_name,
        "recipe": compiled.recipe_name,
        # the schedule that was applied, step by step (RecSchedule.replay takes it)
        "trace": compiled.trace,
        "target": str(compiled.target),
        "plan": dataclasses.asdict(compiled.plan),
        "signature": signature.to_json(),
        # the kernel's states may be padded to the vector width; results are sliced to these
        "visible_state_shapes": [list(shape) for shape in compiled.state_shapes],
        # how weights in the user's sizes are padded to the kernel's (load(weights=...) does it)
        "weight_padding": {name: [list(p) for p in pads] for name, pads in compiled.weight_padding.items()},
        "vocab_bound": compiled._vocab_bound,
        "versions": {"cortex_tvm": __version__, "tvm": tvm.__version__},
        # other names for the weights (a PyTorch state_dict's), so load(weights=...) takes them too
        "aliases": dict(compiled.aliases),
        "cpu": integrity.target_cpu(compiled.target),
    }
    files = {LIB: _atomic(os.path.join(path, LIB), compiled.executable.export_library)}

    def write_weights(tmp):
        with open(tmp, "wb") as f:
            np.savez(f, **compiled.model_weights)
    files[WEIGHTS] = _atomic(os.path.join(path, WEIGHTS), write_weights)
    meta = integrity.seal({**meta, "files": files})

    def write_meta(tmp):
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(meta, f, indent=1)
    _atomic(os.path.join(path, META), write_meta)
    return path


def _read_meta(path):
    meta_path = os.path.join(path, META)
    if not os.path.isdir(path):
        raise FileNotFoundError(f"load: {path!r} is not a directory written by CompiledModel.export")
    if not os.path.exists(meta_path):
        raise FileNotFoundError(f"load: {path!r} has no {META}; not a directory written by CompiledModel.export")
    try:
        with open(meta_path, encoding="utf-8") as f:
            meta = json.load(f)
    except ValueError as err:          # also bad UTF-8 (UnicodeDecodeError is a ValueError)
        raise ValueError(f"load: {meta_path} is corrupt ({err})") from err
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise ValueError(f"load: {meta_path} has format {meta.get('format') if isinstance(meta, dict) else None!r}, "
                         f"this cortex_tvm reads format {FORMAT} (export the model again)")
    integrity.check_seal(meta, meta_path)
    integrity.check_files(path, meta.get("files"))
    integrity.check_cpu(meta.get("cpu"), os.path.join(path, LIB))
    if Target(meta["target"]).kind.name == "cuda" and not tvm.runtime.enabled("cuda"):
        # (TVM itself stopped in the loader: "a loader of that name is not registered")
        raise ValueError(f"load: {path} holds CUDA code, and TVM's CUDA runtime is not available here "
                         "(tvm.runtime.enabled('cuda') is False: no CUDA driver, libcuda.so.1, or CUDA runtime, "
                         "libcudart, or a TVM built without CUDA); load it on a machine with a GPU")
    return meta


def user_weight_shapes(signature, padding) -> dict:
    """The weights the kernel's module reads, name -> (shape, dtype), in the user's sizes: the
    kernel's shapes without `weight_padding`."""
    return {name: (unpadded_shape(shape, padding.get(name, ())), dtype)
            for name, shape, dtype in signature.model_weights()}


def given_weights(meta, signature, weights):
    """User weights in the model's layout and sizes: validated, float32 copies, padded as the
    kernel's sizes are (`weight_padding`)."""
    padding = meta.get("weight_padding", {})
    given = checked_weights(weights, user_weight_shapes(signature, padding), meta.get("aliases", {}), "load")
    return {name: pad_blocks(array, padding.get(name, ())) for name, array in given.items()}


def read(path, weights=None) -> dict:
    """The parts of an exported model, checked (see `integrity`) before the library is mapped:
    the keyword arguments of `CompiledModel`.  `runtime.load` builds the
    CompiledModel from them; this module stays below the runtime.

    weights: None (the bundled ones) or a dict name -> numpy array / torch tensor with
    exactly the model's weights (meta.json "signature": the transform's inputs and the
    kernel's other weights) in the model's layout and the user's sizes, float32; they are
    padded to the kernel's sizes (meta.json "weight_padding"), and packing and leaf tables
    are computed from them by the module's transform function, as after compile().
    """
    path = os.fspath(path)
    meta = _read_meta(path)
    signature = KernelSignature.from_json(meta.get("signature") or {})
    plan_fields = {f.name for f in dataclasses.fields(RuntimePlan)}
    plan = RuntimePlan(**{k: _tuples(v) for k, v in meta["plan"].items() if k in plan_fields})
    if plan.amx:
        amx_bf16.request_permission()   # (the CPU was checked for AMX with the rest of its features)
    if weights is None:
        try:
            with np.load(io.BytesIO(integrity.read_checked(path, WEIGHTS, meta["files"]))) as npz:
                arrays = {name: np.ascontiguousarray(npz[name]) for name, _, _ in signature.model_weights()}
        except (OSError, KeyError, ValueError, zipfile.BadZipFile) as err:
            raise ValueError(f"load: {os.path.join(path, WEIGHTS)} is unreadable ({err})") from err
    else:
        arrays = given_weights(meta, signature, weights)
    # the library's bytes as checked, mapped from a private copy: never the path itself
    executable = integrity.LoadedLibrary(integrity.read_checked(path, LIB, meta["files"]))
    return {"vocab_bound": meta["vocab_bound"], "aliases": meta.get("aliases", {}), "signature": signature,
            "executable": executable, "target": Target(meta["target"]), "plan": plan, "weights": arrays,
            "recipe_name": meta["recipe"], "state_shapes": meta.get("visible_state_shapes"),
            "model_name": meta["model"], "trace": meta.get("trace", []),
            "weight_padding": meta.get("weight_padding", {})}
