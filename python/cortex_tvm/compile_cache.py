"""The build cache: `tvm.compile` once per scheduled module, target and pass config, in this
process and (with CORTEX_TVM_CACHE_DIR) on disk, shared between processes.

Below `build` (which schedules a model and assembles the CompiledModel): what it owns is the
compiled code and its integrity on disk, not which program is compiled.
"""
from __future__ import annotations

import concurrent.futures
import hashlib
import os
import tempfile
import threading
import warnings
from pathlib import Path

import tvm
import tvm_ffi
from tvm.target import Target

from . import amx_bf16, config, dot_bf16, integrity, tir_pipeline

_cache: dict = {}
_cache_lock = threading.Lock()
#: key -> the lock its one build holds (`build_module`)
_building: dict = {}
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
        return integrity.LoadedLibrary(blob, os.path.dirname(path))
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


def compile_module(mod: tvm.IRModule, target: Target, pass_config: dict | None = None):
    """tvm.compile with this package's pipeline and the targets' checks, cached nowhere: what
    `build_module` builds, and what needs the built module itself rather than its functions (an
    object file for another machine, `compiler.cross_compile`; a library linked by another
    toolchain, `tune.rpc`), which a library loaded from the disk cache no longer holds."""
    global _compiles
    dot_bf16.check_target(mod, target)      # vdpbf16ps code for a CPU without it: a clear error, not SIGILL
    amx_bf16.check_target(mod, target)      # the same for AMX tiles, and the tile state Linux lends on request
    with tvm.transform.PassContext(opt_level=3, config=pass_config or {}):
        executable = tvm.compile(mod, target=target, tir_pipeline=tir_pipeline.NAME)
    with _cache_lock:
        _compiles += 1
    return executable


def build_module(mod: tvm.IRModule, target: Target, pass_config: dict | None = None, *, calls_only=False):
    """`compile_module` with an in-process cache keyed by the IR's structural hash, target and
    config, and an optional disk cache (CORTEX_TVM_CACHE_DIR) shared between processes, whose
    entries load as `integrity.LoadedLibrary`.  Different modules build at once on different
    threads (LLVM releases the GIL); the same one, once.  calls_only (a caller that only calls
    the module's functions): with a disk cache a fresh build is stored and then used from the
    stored library, so its machine code is made once, for the library, not again by TVM's JIT."""
    pass_config = pass_config or {}
    key = (tvm_ffi.structural_hash(mod), str(target), repr(sorted(pass_config.items())))
    with _cache_lock:
        if key in _cache:
            return _cache[key]
        building = _building.setdefault(key, threading.Lock())
    with building:                          # a second caller of the same module waits for the first
        with _cache_lock:
            if key in _cache:
                return _cache[key]
        disk = _disk_path(mod, target, pass_config)
        # (a library from the disk cache runs AMX code too: its process asks for the tile state first,
        # or the first tile instruction stops it, SIGILL)
        if disk:
            amx_bf16.check_target(mod, target)
        executable = _disk_load(disk) if disk else None
        if executable is None:
            executable = compile_module(mod, target, pass_config)
            if disk:
                _disk_store(executable, disk)
                if calls_only:
                    executable = _disk_load(disk) or executable
        with _cache_lock:
            _cache[key] = executable
            _building.pop(key, None)
        return executable


def build_functions(functions: dict, target: Target, pass_config: dict | None = None) -> dict:
    """{name: callable} for {name: PrimFunc}: each function its own module through `build_module`,
    the modules built and made callable at once, one thread each (up to the cores).  A training
    pass's forward and backward (TreeLSTM h = 150, Zen 4) took 1.1-1.2 and 4.9-6.1 s in TVM and LLVM,
    and 0.7 and 3.2-3.3 s more for their machine code at the first call: on two cores the backward alone
    sets the time (docs/bench-2026-12-07/compile/split_probe.txt)."""
    def callable_of(name):
        return build_module(tvm.IRModule({name: functions[name]}), target, pass_config, calls_only=True)[name]
    workers = min(len(functions), len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1)
    if workers <= 1:
        return {name: callable_of(name) for name in functions}
    with concurrent.futures.ThreadPoolExecutor(workers, thread_name_prefix="cortex-build") as pool:
        return dict(zip(functions, pool.map(callable_of, functions)))
