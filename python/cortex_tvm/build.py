"""Build: a scheduled program -> a runtime module (cached per process and on disk) -> CompiledModel.

The stage below `compiler` (which picks the schedule) and above `runtime` (which runs it).
"""
from __future__ import annotations

import hashlib
import os
import tempfile
import threading
import warnings
from pathlib import Path

import tvm
import tvm_ffi
from tvm.target import Target

from . import config, dot_bf16, integrity, recipes, tir_pipeline
from .kernel_args import model_weight_arrays
from .runtime import CompiledModel
from .schedule import RecSchedule, ScheduleError
from .target import make_target

_cache: dict = {}
_cache_lock = threading.Lock()
_compiles = 0


def compile_count() -> int:
    """How many times `tvm.compile` ran in this process (the cache hides repeats)."""
    return _compiles



_source_fingerprint = None
#: beside each cached library: the sha256 of its bytes, checked before it is loaded
DIGEST_SUFFIX = ".sha256"


def source_fingerprint() -> str:
    """sha256 of this package's .py sources (part of the disk cache key: edits invalidate it)."""
    global _source_fingerprint
    if _source_fingerprint is None:
        digest = hashlib.sha256()
        root = Path(__file__).resolve().parent
        for path in sorted(root.rglob("*.py")):
            digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
        _source_fingerprint = digest.hexdigest()
    return _source_fingerprint


def _disk_path(mod, target, pass_config):
    """Where the disk cache (CORTEX_TVM_CACHE_DIR) keeps this build, or None without a cache dir."""
    cache_dir = config.load().cache_dir
    if not cache_dir:
        return None
    digest = hashlib.sha256()
    for part in (source_fingerprint(), tvm.__version__, str(target),
                 repr(sorted(pass_config.items())), mod.script()):
        digest.update(part.encode() + b"\0")
    return os.path.join(cache_dir, f"cortex-{digest.hexdigest()[:40]}.so")


def _disk_load(path):
    """The cached library at `path`, or None (absent, or not the bytes that were stored).

    The library is loaded only when its bytes match the sha256 written beside it at store
    time, and from a private copy of exactly the bytes that were checked: a truncated or
    edited entry (a killed writer, a full disk, another version) is rebuilt, never mapped
    (loading a truncated .so kills the process with SIGBUS)."""
    if not os.path.exists(path):
        return None
    try:
        with open(path, "rb") as f:
            blob = f.read()
        with open(path + DIGEST_SUFFIX, encoding="ascii") as f:
            recorded = f.read().strip()
    except OSError as err:
        warnings.warn(f"compile cache: cannot read {path} or its digest ({err}); rebuilding", stacklevel=4)
        return None
    if hashlib.sha256(blob).hexdigest() != recorded:
        warnings.warn(f"compile cache: {path} does not match its sha256 (damaged or incomplete); "
                      "rebuilding", stacklevel=4)
        return None
    try:
        return tvm.runtime.Executable(integrity.load_library(blob, os.path.dirname(path)))
    except Exception as err:  # noqa: BLE001 - a damaged entry is rebuilt, not fatal
        warnings.warn(f"compile cache: cannot load {path} ({err}); rebuilding", stacklevel=4)
        return None


def _disk_store(executable, path):
    """Atomic: the library and then its sha256 are written to temporary files in the cache dir
    and renamed into place (the digest last: an entry without one is never loaded)."""
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd, tmp = tempfile.mkstemp(suffix=".so", prefix=".tmp-", dir=os.path.dirname(path))
        os.close(fd)
        try:
            executable.export_library(tmp)
            with open(tmp, "rb") as f:
                digest = hashlib.sha256(f.read()).hexdigest()
            os.replace(tmp, path)
            fd, tmp = tempfile.mkstemp(suffix=".sha256", prefix=".tmp-", dir=os.path.dirname(path))
            with os.fdopen(fd, "w", encoding="ascii") as f:
                f.write(digest + "\n")
            os.replace(tmp, path + DIGEST_SUFFIX)
        finally:
            if os.path.exists(tmp):
                os.remove(tmp)
    except Exception as err:  # noqa: BLE001 - the cache is an optimization
        warnings.warn(f"compile cache: cannot write {path} ({err})", stacklevel=4)


def build_module(mod: tvm.IRModule, target: Target, pass_config: dict | None = None):
    """tvm.compile with an in-process cache keyed by the IR's structural hash, target and config,
    and an optional disk cache (CORTEX_TVM_CACHE_DIR) shared between processes."""
    global _compiles
    pass_config = pass_config or {}
    dot_bf16.check_target(mod, target)      # vdpbf16ps code for a CPU without it: a clear error, not SIGILL
    key = (tvm_ffi.structural_hash(mod), str(target), repr(sorted(pass_config.items())))
    with _cache_lock:
        if key in _cache:
            return _cache[key]
        disk = _disk_path(mod, target, pass_config)
        executable = _disk_load(disk) if disk else None
        if executable is None:
            with tvm.transform.PassContext(opt_level=3, config=pass_config):
                executable = tvm.compile(mod, target=target, tir_pipeline=tir_pipeline.NAME)
            _compiles += 1
            if disk:
                _disk_store(executable, disk)
        _cache[key] = executable
        return executable


def schedule_model(model, target, schedule=None, bf16_dot: bool = True):
    """model -> lowered -> RecSchedule with the recipe applied and finalized.

    A bf16 recipe made by `recipes.with_precision` multiplies with vdpbf16ps (`dot_bf16`)
    where the target's CPU has AVX512_BF16; `bf16_dot=False` keeps it storage-only (for code
    that someone else compiles, for a target this cannot check)."""
    def fresh():
        return RecSchedule(model.lower(specialize_leaves=False))

    # (a Recipe is already resolved: the compile resolves its recipe once)
    recipe = schedule if isinstance(schedule, recipes.Recipe) else recipes.resolve(model, target, schedule)
    if bf16_dot:
        recipe = recipes.for_target(recipe, target)
    elif recipe.bf16_dot:
        recipe = recipes.for_target(recipe, None)
    tried = []

    def kept():                     # fitted's last schedule is the one its recipe applied to
        tried.append(fresh())
        return tried[-1]
    if recipe.knobs:
        try:
            recipe = recipe.fitted(kept)
            return tried[-1].finalize(), recipe
        except ScheduleError as err:
            if schedule is not None:
                raise
            # the model's default recipe does not fit these sizes: the generic one always does
            warnings.warn(f"{err}; using the generic 'auto' schedule", stacklevel=3)
            recipe = recipes.resolve(model, target, "auto")
    rs = fresh()
    recipe.apply(rs)
    return rs.finalize(), recipe


def build_schedule(model, rs, target="llvm", recipe=None, bounds_check: bool = False, state_shapes=None,
                   padding=None):
    """A scheduled program (RecSchedule) + the model's weights -> CompiledModel.

    One module is built for the target: the kernel and the parameter transforms beside it
    (`hoist`'s leaf tables, `pack`'s layouts), which the CompiledModel runs once on the weights.
    `recipe` (a Recipe) only names the result.  padding: when `model` is a padded model, how it
    was padded from the user's (`padding.Padding`, the compile's `ProgramFacts.padding`): the
    result pads weights given in the user's sizes the same way (`CompiledModel.weight_padding`).
    """
    tgt = make_target(target)
    rs.finalize()
    recipe_name = recipe.name if recipe is not None else "custom"
    # (TVM's tirx.instrument_bound_checkers adds nothing to s_tir kernels in 0.27: what guards them
    # is CompiledModel.check, run on every call with bounds_check=True)
    executable = build_module(rs.module(), tgt, rs.plan.pass_config())
    signature = rs.signature
    compiled = CompiledModel(signature, executable, tgt, rs.plan, model_weight_arrays(model, signature),
                             vocab_bound=model.vocab_bound, model_name=type(model).__name__,
                             aliases=getattr(model, "aliases", {}), recipe_name=recipe_name,
                             state_shapes=state_shapes, lowered=rs.lowered,
                             weight_padding=None if padding is None else padding.weight_padding,
                             trace=[step.as_json() for step in rs.trace])
    compiled.bounds_check = bounds_check
    return compiled
