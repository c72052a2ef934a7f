"""A damaged export, or one built for another CPU, is a ValueError in the loading process, never a
signal: each file truncated or altered in turn, each loaded in a fresh subprocess."""
import json
import os
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from tvm.target import Target

import cortex_tvm as ct
from cortex_tvm import export, integrity

V = 30


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    model = ct.models.TreeFC(hidden_size=8, vocab_size=V)
    compiled = model.compile(schedule="none")
    path = compiled.export(tmp_path_factory.mktemp("export") / "fc")
    trees = ct.data.random_trees(4, (1, 9), seed=2, vocab_size=V)
    return path, trees, compiled(trees)


def _load_in_subprocess(path) -> subprocess.CompletedProcess:
    """ct.load(path) in a fresh interpreter: exit 3 with the message on ValueError, 0 on success."""
    script = textwrap.dedent(f"""
        import sys, cortex_tvm as ct
        try:
            ct.load({str(path)!r})
        except ValueError as err:
            print("ValueError:", err)
            sys.exit(3)
        print("loaded")
    """)
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ))


def _copy(src, dst):
    shutil.copytree(src, dst)
    return str(dst)


def _truncate(path):
    data = open(path, "rb").read()
    with open(path, "wb") as f:
        f.write(data[:len(data) // 2])


def _flip_byte(path):
    data = bytearray(open(path, "rb").read())
    data[len(data) // 2] ^= 0x01
    with open(path, "wb") as f:
        f.write(bytes(data))


def _edit_meta(path, edit, reseal=False):
    meta_path = os.path.join(path, export.META)
    meta = json.load(open(meta_path, encoding="utf-8"))
    edit(meta)
    if reseal:                                  # a consistent meta.json that describes another build
        meta = integrity.seal({k: v for k, v in meta.items() if k != "meta_sha256"})
    with open(meta_path, "w", encoding="utf-8") as f:
        json.dump(meta, f)


def test_intact_export_loads_and_records_digests(exported, tmp_path):
    path, trees, want = exported
    meta = json.load(open(os.path.join(path, export.META), encoding="utf-8"))
    assert meta["format"] == 4 and set(meta["files"]) == {export.LIB, export.WEIGHTS}
    for name, digest in meta["files"].items():
        assert digest == integrity.file_digest(os.path.join(path, name))
    assert meta["cpu"]["mcpu"] and "sse2" in meta["cpu"]["features"]
    proc = _load_in_subprocess(path)
    assert proc.returncode == 0 and "loaded" in proc.stdout, proc.stderr[-2000:]
    np.testing.assert_array_equal(ct.load(path)(trees), want)


@pytest.mark.parametrize("name, damage", [(name, damage) for name in (export.LIB, export.WEIGHTS, export.META)
                                           for damage in (_truncate, _flip_byte, os.remove)
                                           if (name, damage) != (export.META, os.remove)])
def test_damaged_file_is_a_value_error_in_a_fresh_process(exported, tmp_path, name, damage):
    path = _copy(exported[0], tmp_path / "copy")
    damage(os.path.join(path, name))
    proc = _load_in_subprocess(path)
    # a normal exit with our message: a signal (SIGBUS, SIGSEGV) would give a negative return code
    assert proc.returncode == 3, (proc.returncode, proc.stdout[-1000:], proc.stderr[-2000:])
    assert proc.stdout.startswith("ValueError: load: ") and os.path.join(path, name) in proc.stdout, proc.stdout


def test_missing_meta_is_file_not_found(exported, tmp_path):
    path = _copy(exported[0], tmp_path / "copy")
    os.remove(os.path.join(path, export.META))
    with pytest.raises(FileNotFoundError, match="meta.json"):
        ct.load(path)


def test_edited_meta_is_detected(exported, tmp_path):
    path = _copy(exported[0], tmp_path / "copy")
    _edit_meta(path, lambda m: m.update(vocab_bound=V + 100))     # valid JSON, different content
    with pytest.raises(ValueError, match="meta.json was altered"):
        ct.load(path)


def test_old_format_is_rejected(exported, tmp_path):
    path = _copy(exported[0], tmp_path / "copy")
    _edit_meta(path, lambda m: m.update(format=1))
    with pytest.raises(ValueError, match=f"format 1.*reads format {export.FORMAT}"):
        ct.load(path)


def test_library_for_a_cpu_feature_this_host_lacks(exported, tmp_path):
    """A library compiled for an instruction set the host lacks (AVX-512 on an AVX2 machine):
    a ValueError naming the feature, in a fresh process, before the library is mapped."""
    missing = sorted(set(integrity.X86_ISA) - integrity.host_isa())
    if not missing:
        pytest.skip("this CPU has every instruction-set extension cortex_tvm knows")
    path = _copy(exported[0], tmp_path / "copy")
    _edit_meta(path, lambda m: m["cpu"]["features"].append(missing[0]), reseal=True)
    proc = _load_in_subprocess(path)
    assert proc.returncode == 3, (proc.returncode, proc.stderr[-2000:])
    assert "CPU features this CPU lacks" in proc.stdout and missing[0] in proc.stdout, proc.stdout


def test_cpu_check_against_an_avx2_host():
    """The comparison itself, with an explicit host: AVX-512 code on a Haswell (AVX2) CPU fails,
    Haswell code on it passes, tuning hints in LLVM's list are never required."""
    haswell = integrity.target_cpu(Target({"kind": "llvm", "mcpu": "haswell"}))
    avx2_host = set(haswell["features"]) & set(integrity.X86_ISA)
    assert "avx2" in avx2_host and "avx512f" not in avx2_host
    integrity.check_cpu(haswell, "lib.so", host_features=avx2_host)
    skylake = integrity.target_cpu(Target({"kind": "llvm", "mcpu": "skylake-avx512"}))
    with pytest.raises(ValueError, match="lib.so was compiled for CPU features this CPU lacks: .*avx512f"):
        integrity.check_cpu(skylake, "lib.so", host_features=avx2_host)
    mattr = integrity.target_cpu(Target({"kind": "llvm", "mcpu": "haswell", "mattr": ["+avx512f"]}))
    with pytest.raises(ValueError, match="avx512f.*mattr=\\['\\+avx512f'\\]"):
        integrity.check_cpu(mattr, "lib.so", host_features=avx2_host)
    assert "slow-3ops-lea" in haswell["features"]          # a tuning hint: not an instruction set
    integrity.check_cpu(haswell, "lib.so", host_features=avx2_host - {"slow-3ops-lea"})


@pytest.mark.parametrize("edit", [lambda m: m.pop("cpu"), lambda m: m["cpu"].update(triple=None)])
def test_a_meta_without_cpu_facts_is_refused(exported, tmp_path, edit):
    """Before, a meta with no `cpu` (or no triple) loaded with no check at all (issue 21)."""
    path = _copy(exported[0], tmp_path / "copy")
    _edit_meta(path, edit, reseal=True)
    with pytest.raises(ValueError, match="records no CPU .* for its code; export the model again"):
        ct.load(path)
    with pytest.raises(ValueError, match="records no CPU"):
        integrity.check_cpu({}, "lib.so")


def test_library_for_another_architecture(exported, tmp_path):
    path = _copy(exported[0], tmp_path / "copy")
    _edit_meta(path, lambda m: m["cpu"].update(triple="aarch64-linux-gnu"), reseal=True)
    with pytest.raises(ValueError, match="compiled for aarch64"):
        ct.load(path)


def test_export_writes_stay_atomic(exported, tmp_path):
    """Re-exporting over a directory leaves no temporary files and a loadable, sealed result."""
    model = ct.models.TreeFC(hidden_size=8, vocab_size=V)
    compiled = model.compile(schedule="none")
    path = compiled.export(tmp_path / "again")
    compiled.export(path)
    assert sorted(os.listdir(path)) == ["lib.so", "meta.json", "weights.npz"]
    ct.load(path)


def test_loaded_bytes_are_the_checked_bytes(tmp_path):
    """read_checked hands back the exact bytes it verified, and refuses a file that no longer
    matches its digest (swapped after check_files ran); load_library maps a private copy."""
    from cortex_tvm import integrity
    path = tmp_path / "blob.bin"
    path.write_bytes(b"exported bytes")
    files = {"blob.bin": integrity.file_digest(path)}
    integrity.check_files(tmp_path, files)
    assert integrity.read_checked(tmp_path, "blob.bin", files) == b"exported bytes"
    path.write_bytes(b"exported bytez")          # same size, other bytes
    with pytest.raises(ValueError, match="changed after it was checked"):
        integrity.read_checked(tmp_path, "blob.bin", files)
    before = set(os.listdir(tmp_path))
    with pytest.raises(RuntimeError):            # not a library: TVM refuses it, nothing is left behind
        integrity.load_library(b"not a shared library", str(tmp_path))
    assert set(os.listdir(tmp_path)) == before
