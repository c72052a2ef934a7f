"""The compile cache: the same model twice builds once and calls never recompile; on disk, a second
process compiles nothing, a damaged entry is rebuilt, and the key covers source, target and pass
config."""
import os

import numpy as np
import pytest

import cortex_tvm as ct
from cortex_tvm.data import random_trees

from runtime_util import H, run_python


def test_same_model_twice_reuses_build_and_calls_never_recompile(sst):
    model = ct.models.TreeFC(hidden_size=H, vocab_size=len(sst[1]), seed=3)
    first = model.compile()
    count = ct.compile_count()
    second = ct.models.TreeFC(hidden_size=H, vocab_size=len(sst[1]), seed=3).compile()
    assert ct.compile_count() == count
    assert second.executable is first.executable
    trees = sst[0][:1000]
    sizes = [1, 2, 3, 5, 8, 13, 21, 34, 55, 89]
    i = 0
    while i < len(trees):
        n = sizes[i % len(sizes)]
        first(trees[i:i + n])
        i += n
    assert ct.compile_count() == count


def test_disk_cache_second_process_compiles_nothing(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    monkeypatch.setenv("CORTEX_TVM_CACHE_DIR", str(cache))
    model = ct.models.TreeFC(hidden_size=8, vocab_size=23, seed=5)    # sizes no other test builds
    count = ct.compile_count()
    compiled = model.compile(schedule="auto")
    assert ct.compile_count() == count + 1
    entries = sorted(os.listdir(cache))
    assert len(entries) == 2 and entries[0].endswith(".so"), entries   # no temp files left behind
    assert entries[1] == entries[0] + ".sha256"
    trees = random_trees(6, (1, 12), seed=2, vocab_size=23)
    np.save(tmp_path / "want.npy", compiled(trees))
    out = run_python(f"""
        import numpy as np, cortex_tvm as ct
        m = ct.models.TreeFC(hidden_size=8, vocab_size=23, seed=5)
        c = m.compile(schedule="auto")
        got = c(ct.data.random_trees(6, (1, 12), seed=2, vocab_size=23))
        np.testing.assert_array_equal(got, np.load({str(tmp_path / 'want.npy')!r}))
        print("compiles", ct.compile_count())
    """, env={"CORTEX_TVM_CACHE_DIR": str(cache)})
    assert "compiles 0" in out


@pytest.mark.parametrize("damage", ["truncate", "flip", "no digest"])
def test_a_damaged_disk_cache_entry_is_rebuilt_not_loaded(tmp_path, damage):
    """A truncated library in the cache killed the next process with SIGBUS (issue 21): each
    entry is checked against the sha256 stored beside it, in a fresh process."""
    cache = tmp_path / "cache"
    script = """
        import warnings, numpy as np, cortex_tvm as ct
        m = ct.models.TreeFC(hidden_size=8, vocab_size=23, seed=6)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            c = m.compile(schedule="auto")
        trees = ct.data.random_trees(4, (1, 9), seed=3, vocab_size=23)
        np.testing.assert_allclose(c(trees), m.reference(trees), atol=1e-4)
        print("compiles", ct.compile_count())
        print("warnings", [str(w.message) for w in caught if "compile cache" in str(w.message)])
    """
    assert "compiles 1" in run_python(script, env={"CORTEX_TVM_CACHE_DIR": str(cache)})
    (library,) = [p for p in cache.iterdir() if p.suffix == ".so"]
    blob = library.read_bytes()
    if damage == "truncate":
        library.write_bytes(blob[: len(blob) // 2])
    elif damage == "flip":
        library.write_bytes(blob[:-64] + bytes(b ^ 0xFF for b in blob[-64:]))
    else:
        (cache / (library.name + ".sha256")).unlink()
    out = run_python(script, env={"CORTEX_TVM_CACHE_DIR": str(cache)})
    assert "compiles 1" in out                      # rebuilt, and the numbers are right
    want = "cannot read" if damage == "no digest" else "does not match its sha256"
    assert want in out, out
    assert "compiles 0" in run_python(script, env={"CORTEX_TVM_CACHE_DIR": str(cache)})   # repaired


def test_disk_cache_key_covers_source_target_and_pass_config(tmp_path, monkeypatch):
    from cortex_tvm import compile_cache
    monkeypatch.setenv("CORTEX_TVM_CACHE_DIR", str(tmp_path))
    model = ct.models.TreeFC(hidden_size=8, vocab_size=23)
    mod = model.lower(specialize_leaves=False).mod
    llvm = ct.make_target("llvm")
    a = compile_cache._disk_path(mod, llvm, {})
    assert a == compile_cache._disk_path(mod, llvm, {})
    assert a != compile_cache._disk_path(mod, llvm, {"tirx.instrument_bound_checkers": True})
    assert a != compile_cache._disk_path(mod, ct.make_target({"kind": "llvm"}), {})
    other = ct.models.TreeFC(hidden_size=16, vocab_size=23).lower(specialize_leaves=False)
    assert a != compile_cache._disk_path(other.mod, llvm, {})
    monkeypatch.setattr(compile_cache, "_source_fingerprint", "edited")
    assert a != compile_cache._disk_path(mod, llvm, {})


def test_a_model_from_the_disk_cache_exports_and_a_loaded_one_exports_again(tmp_path, monkeypatch):
    """TVM's export_library links the object code of a fresh build, which a library loaded from
    the disk cache or from an export lacks (g++ stopped with "no input files"): such a model
    exports the library's bytes as loaded, and the export loads and computes the same."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("CORTEX_TVM_CACHE_DIR", str(cache))
    from cortex_tvm import compile_cache
    trees = random_trees(5, (1, 10), seed=4, vocab_size=23)
    monkeypatch.setattr(compile_cache, "_cache", {})           # (built here, so stored in this cache)
    built = ct.models.TreeFC(hidden_size=8, vocab_size=23, seed=9).compile(schedule="auto")
    monkeypatch.setattr(compile_cache, "_cache", {})           # as a second process: from the disk
    count = ct.compile_count()
    cached = ct.models.TreeFC(hidden_size=8, vocab_size=23, seed=9).compile(schedule="auto")
    assert ct.compile_count() == count and cached.executable is not built.executable
    cached.export(tmp_path / "from_cache")
    loaded = ct.load(tmp_path / "from_cache")
    loaded.export(tmp_path / "again")
    again = ct.load(tmp_path / "again")
    want = built(trees)
    for model in (cached, loaded, again):
        np.testing.assert_array_equal(model(trees), want)
        with pytest.raises(ValueError, match="loaded from a shared library .* keeps no source"):
            model.inspect_source()                  # (it returned "" for a library)
    assert "define" in built.inspect_source()


def test_cross_compile_with_a_disk_cache_writes_the_object_every_time(tmp_path, monkeypatch):
    """cross_compile writes the built module's object code, which a library from the disk cache
    does not hold ("Module[library] does not support WriteToFile" on the second run): it builds
    outside the cache."""
    from cortex_tvm import compile_cache
    from cortex_tvm.compiler import cross_compile

    monkeypatch.setenv("CORTEX_TVM_CACHE_DIR", str(tmp_path / "cache"))
    model = ct.models.TreeFC(hidden_size=8, vocab_size=23, seed=9)
    for name in ("first.o", "second.o"):
        monkeypatch.setattr(compile_cache, "_cache", {})       # each as a new process
        path = cross_compile(model, {"kind": "llvm", "mcpu": "haswell"}, tmp_path / name)
        assert open(path, "rb").read(4) == b"\x7fELF"
    assert (tmp_path / "first.o").read_bytes() == (tmp_path / "second.o").read_bytes()


def test_a_training_pass_from_the_disk_cache_builds_nothing_and_gives_the_same_gradients(tmp_path):
    """The level pass's two modules go to the disk cache too (before, every process built them:
    10-15 s for TreeLSTM h = 150): the first process stores them and calls the stored library,
    a second one builds nothing, and both give the gradients of a process without a cache."""
    script = """
        import numpy as np, cortex_tvm as ct
        model = ct.models.TreeFC(hidden_size=8, vocab_size=31, seed=4)
        compiled = model.compile(training=True)
        trees = ct.data.random_trees(5, (1, 12), seed=6, vocab_size=31)
        out, vjp = compiled.vjp(trees)
        grads = vjp(np.ones_like(out))
        print("compiles", ct.compile_count(), "pass", compiled.adjoint.level_pass is not None)
        print("sums", " ".join(f"{k}={float(np.abs(v).sum()):.6e}" for k, v in sorted(grads.items())))
    """
    cache = str(tmp_path / "cache")
    first, second = (run_python(script, env={"CORTEX_TVM_CACHE_DIR": cache}) for _ in range(2))
    plain = run_python(script)
    assert "compiles 3 pass True" in first and "compiles 0 pass True" in second, (first, second)
    assert len([p for p in os.listdir(cache) if p.endswith(".so")]) == 3      # the kernel, forward, backward

    def sums(out):
        return next(line for line in out.splitlines() if line.startswith("sums"))
    assert sums(first) == sums(second) == sums(plain)
