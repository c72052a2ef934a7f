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
