"""Checks that make loading an exported model safe: file digests and the CPU's instruction sets.

A damaged ``lib.so`` is mapped into the process by the dynamic loader and
kills it (SIGBUS on a truncated file), and a library compiled for
instructions the CPU lacks dies with SIGILL at the first call.  Neither can
be caught once it happens, so ``cortex_tvm.load`` checks everything here
before it touches the library: each file's size and sha256 as recorded at
export, the digest of meta.json itself, and the instruction-set extensions
the code was compiled for against the ones this CPU has.  A library that
``cortex_tvm.load`` or the disk compile cache loads from checked bytes is a
`LoadedLibrary`, which keeps them (its export writes them; it has no source
to show, `source_of`).
"""
from __future__ import annotations

import hashlib
import json
import os
import tempfile

import tvm

from .target import X86_ARCHES, X86_ISA, host_isa

__all__ = ["file_digest", "seal", "check_seal", "check_files", "load_library", "LoadedLibrary", "source_of",
           "target_cpu", "check_cpu", "host_isa"]

# ----------------------------------------------------------------------------- files
def file_digest(path) -> dict:
    """{"size": bytes, "sha256": hex} of the file at `path`."""
    digest = hashlib.sha256()
    size = 0
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
            size += len(chunk)
    return {"size": size, "sha256": digest.hexdigest()}


def _meta_digest(meta: dict) -> str:
    body = {k: v for k, v in meta.items() if k != "meta_sha256"}
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def seal(meta: dict) -> dict:
    """`meta` with "meta_sha256": the digest of everything else in it (an edited meta.json shows)."""
    return {**meta, "meta_sha256": _meta_digest(meta)}


def check_seal(meta: dict, meta_path) -> None:
    """ValueError unless meta.json is exactly what export wrote."""
    if meta.get("meta_sha256") != _meta_digest(meta):
        raise ValueError(f"load: {meta_path} was altered after export (its content does not match its "
                         "recorded sha256); export the model again")


def check_files(directory, files: dict) -> None:
    """ValueError naming the first file of an export that is missing, truncated or altered."""
    if not isinstance(files, dict) or not files:
        raise ValueError(f"load: {os.path.join(directory, 'meta.json')} records no file digests")
    for name, want in files.items():
        path = os.path.join(directory, name)
        if os.path.basename(name) != name:
            raise ValueError(f"load: meta.json names a file outside the export directory: {name!r}")
        if not os.path.isfile(path):
            raise ValueError(f"load: {path} is missing")
        got = file_digest(path)
        if got["size"] != want.get("size"):
            raise ValueError(f"load: {path} is damaged: {got['size']} bytes, export wrote {want.get('size')} "
                             "(truncated or overwritten); export the model again")
        if got["sha256"] != want.get("sha256"):
            raise ValueError(f"load: {path} is damaged: its sha256 differs from the one recorded at export; "
                             "export the model again")


def read_checked(directory, name: str, files: dict) -> bytes:
    """The bytes of export file `name`, read once and checked against its recorded size and
    sha256: what is used is exactly what was checked (a file swapped after `check_files`
    is caught here)."""
    path = os.path.join(directory, name)
    with open(path, "rb") as f:
        blob = f.read()
    want = files.get(name, {})
    if len(blob) != want.get("size") or hashlib.sha256(blob).hexdigest() != want.get("sha256"):
        raise ValueError(f"load: {path} changed after it was checked (its bytes no longer match the "
                         "digest recorded at export); export the model again")
    return blob


def load_library(blob: bytes, directory=None):
    """A TVM module from the bytes of a shared library, loaded from a private copy of exactly
    those bytes (so no other writer can change what is mapped; the copy is removed once
    mapped).  `directory`: where to put the copy (default: the system's temporary folder)."""
    fd, private = tempfile.mkstemp(suffix=".so", prefix=".load-", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(blob)
        return tvm.runtime.load_module(private)
    finally:
        os.remove(private)        # the loaded library stays mapped


class LoadedLibrary(tvm.runtime.Executable):
    """An executable from the bytes of a shared library (`load_library`) that keeps those bytes:
    exporting it writes them.  TVM's own `export_library` links the object code of what
    `tvm.compile` built, which a loaded library no longer has (g++ stopped with "no input files"
    for a model from the disk cache or from `cortex_tvm.load`, exported again).  Export options
    (a cross compiler, `cc=`) need the compiled module: ValueError."""

    def __init__(self, blob: bytes, directory=None):
        super().__init__(load_library(blob, directory))
        #: the library's bytes, exactly as loaded
        self.library_bytes = blob

    def export_library(self, file_name, **options):
        if options:
            raise ValueError(f"a loaded library is exported as it was loaded; options {sorted(options)} "
                             "need the compiled module (compile the model again)")
        with open(file_name, "wb") as f:
            f.write(self.library_bytes)


def source_of(executable) -> str:
    """The generated source of a built module: CUDA for a GPU target, LLVM IR for the CPU;
    ValueError for a `LoadedLibrary`, which keeps none."""
    if isinstance(executable, LoadedLibrary):
        raise ValueError("inspect_source: this model's code was loaded from a shared library (cortex_tvm.load, "
                         "or the disk compile cache, CORTEX_TVM_CACHE_DIR), which keeps no source; compile "
                         "it in a process without that variable to read its source")
    mod = executable.mod
    return (mod.imports[0] if len(mod.imports) else mod).inspect_source()


# ----------------------------------------------------------------------------- CPU
def _llvm_target(target):
    """The LLVM target whose code runs on the CPU: the target itself, or a GPU target's host."""
    if target.kind.name == "llvm":
        return target
    host = getattr(target, "host", None)
    return host if host is not None and host.kind.name == "llvm" else None


def target_cpu(target) -> dict:
    """What the CPU code of `target` was compiled for: triple, mcpu, mattr and LLVM's feature list."""
    from tvm.target import codegen

    llvm = _llvm_target(target)
    if llvm is None:
        return {"triple": None, "mcpu": None, "mattr": [], "features": []}
    attrs = llvm.export()
    triple = attrs.get("mtriple") or codegen.llvm_get_system_triple()
    return {"triple": str(triple), "mcpu": attrs.get("mcpu"), "mattr": [str(a) for a in attrs.get("mattr", ())],
            "features": sorted(str(f) for f in codegen.llvm_get_cpu_features(llvm))}


def _arch(triple) -> str:
    return str(triple).split("-", 1)[0]


def check_cpu(recorded: dict, lib_path, host_features=None) -> None:
    """ValueError unless this CPU can run code compiled for `recorded` (see `target_cpu`).

    host_features: the host's instruction-set extensions (default: `host_isa()`).
    """
    from tvm.target import codegen

    if not isinstance(recorded, dict) or not recorded.get("triple"):
        # every export records the CPU its code was built for; without it nothing says whether
        # this CPU can run the library, and running it anyway may die on an illegal instruction
        raise ValueError(f"load: the export of {lib_path} records no CPU (triple, features) for its code; "
                         "export the model again")
    here = codegen.llvm_get_system_triple()
    if _arch(recorded["triple"]) != _arch(here):
        raise ValueError(f"load: {lib_path} was compiled for {_arch(recorded['triple'])} "
                         f"({recorded['triple']}), this machine is {_arch(here)}")
    if _arch(here) not in X86_ARCHES:
        return                                  # feature names below are x86's
    required = set(recorded.get("features", ())) & set(X86_ISA)
    have = host_isa() if host_features is None else set(host_features)
    missing = sorted(required - have)
    if missing:
        raise ValueError(f"load: {lib_path} was compiled for CPU features this CPU lacks: "
                         f"{', '.join(missing)} (built with mcpu={recorded.get('mcpu')!r}, "
                         f"mattr={recorded.get('mattr')}); recompile on this machine or build for its "
                         "CPU, e.g. target={'kind': 'llvm', 'mcpu': 'haswell'} for AVX2")


def cannot_run_here(target):
    """Why this CPU cannot run code compiled for `target` (a sentence), or None when it can."""
    try:
        check_cpu(target_cpu(target), "the compiled model")
    except ValueError as err:
        return (f"run: this model was compiled for another CPU, so it can be inspected and exported "
                f"but not run here: {str(err).removeprefix('load: ')}")
    return None
