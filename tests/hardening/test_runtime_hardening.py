"""Bounds checking, threads, the compile cache (in-process and on disk), export/load, memory."""
import os
import subprocess
import sys
import textwrap
import threading
from dataclasses import replace

import numpy as np
import pytest

import cortex_tvm as ct
from cortex_tvm.data import Node, random_trees

import reference as ref
from padded import compile_padded

H = 16


@pytest.fixture(scope="module")
def sst():
    return ct.data.sst_sample()


@pytest.fixture(scope="module")
def fc(sst):
    model = ct.models.TreeFC(hidden_size=H, vocab_size=len(sst[1]))
    return model, compile_padded(model)


def _run(script, env=None, timeout=180):
    env = {**os.environ, **(env or {})}     # same TVM_NUM_THREADS: the "llvm" target records it
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], capture_output=True, text=True,
                          timeout=timeout, env=env)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    return proc.stdout


# ------------------------------------------------------------------ bounds

def test_bounds_checked_build_runs_sst_without_report(sst, fc):
    model, plain = fc
    checked = model.compile(bounds_check=True)
    assert checked.bounds_check and not plain.bounds_check
    trees = sst[0]
    for i in range(0, len(trees), 64):
        np.testing.assert_allclose(checked(trees[i:i + 64]), plain(trees[i:i + 64]), atol=1e-6)
    # a hand-edited index array is refused before the kernel could read out of bounds
    lin = checked.linearize(trees[:3])
    children = lin.children.copy()
    children[-1, 0] = 10 ** 6
    with pytest.raises(ValueError, match="children out of bounds"):
        checked.run(replace(lin, children=children))
    words = lin.words.copy()
    words[1] = len(sst[1])
    with pytest.raises(ValueError, match="words out of bounds"):
        checked.run(replace(lin, words=words))
    np.testing.assert_allclose(checked(trees[:3]), plain(trees[:3]), atol=1e-6)


def test_run_validates_hand_edited_arrays_by_default(sst, fc):
    """Each way an edited Linearized could make the kernel read or skip wrongly is refused by
    run(lin) before the kernel runs; run(lin, check=False) is the opt-out; linearize's own
    arrays pass, and give what __call__ gives."""
    model, compiled = fc
    assert not compiled.bounds_check and compiled.plan.node_tile > 1
    trees = sst[0][:10]
    lin = compiled.linearize(trees)
    roots, _ = compiled.run(lin)
    np.testing.assert_array_equal(roots, compiled(trees))
    lo = lin.level_offsets
    level = 2                                      # an internal level: slots lo[2] .. lo[3]
    first = int(lo[level])

    truncated = lo.copy()
    truncated[level + 1:] -= 1                     # a level one slot short of whole tiles
    children = lin.children.copy()
    children[first, 0] = int(lo[level + 1])        # a child in the next level: not computed yet
    itself = lin.children.copy()
    itself[first, 1] = first                       # a node its own child
    leaf = lin.children.copy()
    leaf[1, 0] = 2                                 # a leaf with a child (leaves have none)
    cases = {
        "not a multiple of the kernel's node tile": replace(
            lin, level_offsets=truncated, children=lin.children[:-1], num_children=lin.num_children[:-1],
            words=lin.words[:-1], roots=np.minimum(lin.roots, int(truncated[-1]) - 1).astype(np.int32)),
        f"slot {first}'s child 0 is slot {int(lo[level + 1])}, which is not in an earlier level": replace(
            lin, children=children),
        f"slot {first}'s child 1 is slot {first}": replace(lin, children=itself),
        "slot 1's child 0 is slot 2": replace(lin, children=leaf),
    }
    for message, bad in cases.items():
        with pytest.raises(ValueError, match=message):
            compiled.run(bad)
    unchecked, _ = compiled.run(replace(lin, children=children), check=False)      # the opt-out runs
    assert unchecked.shape == roots.shape


def test_run_refuses_arrays_of_the_wrong_kind_range_or_layout(sst, fc):
    """The rest of check_bounds' invariants, one edit each, before any kernel runs: a root
    past the state buffer, more children than the model has, arrays of another dtype or
    length, level offsets that do not start at slot 1 or go backwards, and an object that is
    not a Linearized."""
    _, compiled = fc
    lin = compiled.linearize(sst[0][:6])
    n = int(lin.level_offsets[-1])
    roots = lin.roots.copy()
    roots[0] = n                                            # one past the last slot
    num_children = lin.num_children.copy()
    num_children[-1] = compiled.signature.max_children + 1
    backwards = lin.level_offsets.copy()
    backwards[2] = backwards[1] - 1
    late_start = lin.level_offsets.copy()
    late_start[0] = 0
    cases = {
        r"roots out of bounds: values must lie in \[0, %d\)" % n: replace(lin, roots=roots),
        r"num_children out of bounds: values must lie in \[0, %d\)" % (compiled.signature.max_children + 1):
            replace(lin, num_children=num_children),
        "children out of bounds: expected int32": replace(lin, children=lin.children.astype(np.int64)),
        "words out of bounds: expected int32": replace(lin, words=lin.words[:-1]),
        "level_offsets out of bounds: must start at 1 and never decrease": replace(lin, level_offsets=backwards),
        "level_offsets out of bounds: must be int32, start at 1": replace(lin, level_offsets=late_start),
    }
    for message, bad in cases.items():
        with pytest.raises(ValueError, match=message):
            compiled.run(bad)
    with pytest.raises(TypeError, match="expected a Linearized, got dict"):
        compiled.run({"level_offsets": lin.level_offsets})


def test_a_leaf_without_a_word_is_refused_where_leaves_are_table_lookups(sst):
    """ChildSum reads words on inner nodes (no_word marks a node without one); its leaves are
    hoisted tables indexed by word with no clamp, so the marker at a leaf would read one row
    past the table."""
    model = ct.models.ChildSumTreeLSTM(hidden_size=H, vocab_size=len(sst[1]), max_children=4)
    compiled = model.compile()
    assert compiled.plan.hoisted and compiled.signature.no_word == len(sst[1])
    lin = compiled.linearize(sst[0][:3])
    words = lin.words.copy()
    words[1] = compiled.signature.no_word
    with pytest.raises(ValueError, match="a leaf slot holds .* leaf states are read from a table"):
        compiled.run(replace(lin, words=words))
    inner = lin.words.copy()
    inner[int(lin.level_offsets[1])] = compiled.signature.no_word       # at an inner node it is fine
    compiled.run(replace(lin, words=inner))


# ------------------------------------------------------------------ threads

def together(work, count: int) -> list:
    """Run work(0) .. work(count - 1) on `count` threads released at once by a barrier; the
    errors they raised (none may hang)."""
    errors, barrier = [], threading.Barrier(count)

    def run(i):
        try:
            barrier.wait()
            work(i)
        except Exception as err:  # pragma: no cover - returned to the test
            errors.append(err)
    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads)
    return errors


def test_eight_threads_200_calls_each_equal_serial(sst, fc):
    _, compiled = fc
    trees = sst[0]
    batches = [trees[i * 7:i * 7 + 1 + i] for i in range(8)]            # different sizes per thread
    batches[3] = [Node(word=5)]
    batches[5] = trees[200:260]
    serial = [compiled(b) for b in batches]
    mismatches = []

    def work(i):
        for _ in range(200):
            if not np.array_equal(compiled(batches[i]), serial[i]):
                mismatches.append(i)
    assert not together(work, 8) and not mismatches


@pytest.mark.parametrize("name", ["TreeFC", "TreeLSTM"])
def test_eight_threads_make_the_first_call_of_a_fresh_compiled_model_at_once(sst, name):
    """Whatever a CompiledModel sets up on its first call (state buffers per thread, the
    roots' output) is set up under contention here: eight threads start together on a
    model no thread has called, each on its own batch, and each gets the serial answer."""
    trees = sst[0]
    model = getattr(ct.models, name)(hidden_size=H, vocab_size=len(sst[1]), seed=21)
    batches = [trees[40 * i:40 * i + 1 + 3 * i] for i in range(8)]
    expected = [model.compile()(b) for b in batches]          # another CompiledModel, serially
    fresh = model.compile()
    results = [None] * 8

    def first_call(i):
        results[i] = fresh(batches[i])
    assert not together(first_call, 8)
    for got, want in zip(results, expected):
        np.testing.assert_array_equal(got, want)


# ------------------------------------------------------------------ compile cache

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
    out = _run(f"""
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
    assert "compiles 1" in _run(script, env={"CORTEX_TVM_CACHE_DIR": str(cache)})
    (library,) = [p for p in cache.iterdir() if p.suffix == ".so"]
    blob = library.read_bytes()
    if damage == "truncate":
        library.write_bytes(blob[: len(blob) // 2])
    elif damage == "flip":
        library.write_bytes(blob[:-64] + bytes(b ^ 0xFF for b in blob[-64:]))
    else:
        (cache / (library.name + ".sha256")).unlink()
    out = _run(script, env={"CORTEX_TVM_CACHE_DIR": str(cache)})
    assert "compiles 1" in out                      # rebuilt, and the numbers are right
    want = "cannot read" if damage == "no digest" else "does not match its sha256"
    assert want in out, out
    assert "compiles 0" in _run(script, env={"CORTEX_TVM_CACHE_DIR": str(cache)})   # repaired


def test_disk_cache_key_covers_source_target_and_pass_config(tmp_path, monkeypatch):
    from cortex_tvm import build
    monkeypatch.setenv("CORTEX_TVM_CACHE_DIR", str(tmp_path))
    model = ct.models.TreeFC(hidden_size=8, vocab_size=23)
    mod = model.lower(specialize_leaves=False).mod
    llvm = ct.make_target("llvm")
    a = build._disk_path(mod, llvm, {})
    assert a == build._disk_path(mod, llvm, {})
    assert a != build._disk_path(mod, llvm, {"tirx.instrument_bound_checkers": True})
    assert a != build._disk_path(mod, ct.make_target({"kind": "llvm"}), {})
    other = ct.models.TreeFC(hidden_size=16, vocab_size=23).lower(specialize_leaves=False)
    assert a != build._disk_path(other.mod, llvm, {})
    monkeypatch.setattr(build, "_source_fingerprint", "edited")
    assert a != build._disk_path(mod, llvm, {})


# ------------------------------------------------------------------ export / load

def test_export_load_in_fresh_process(tmp_path, sst):
    V = len(sst[1])
    model = ct.models.TreeLSTM(hidden_size=H, vocab_size=V)      # default recipe: packs and hoists
    compiled = model.compile()
    path = compiled.export(tmp_path / "lstm")
    assert sorted(os.listdir(path)) == ["lib.so", "meta.json", "weights.npz"]
    np.save(tmp_path / "want.npy", compiled(sst[0][:50]))
    # weights at load: a TreeFC on the "none" schedule takes the model's own parameters
    fc = ct.models.TreeFC(hidden_size=H, vocab_size=V)
    fc_path = fc.compile().export(tmp_path / "fc")              # packs W
    rng = np.random.default_rng(0)
    new = {k: (rng.standard_normal(v.shape) * 0.3).astype(np.float32) for k, v in fc.weights.items()}
    np.savez(tmp_path / "new.npz", **new)
    np.save(tmp_path / "want_fc.npy", ref.roots("TreeFC", sst[0][:20], new))
    out = _run(f"""
        import numpy as np, cortex_tvm as ct
        trees, _ = ct.data.sst_sample()
        c = ct.load({str(path)!r})
        assert c.model_name == "TreeLSTM" and c.recipe_name == "derived", (c.model_name, c.recipe_name)
        np.testing.assert_array_equal(c(trees[:50]), np.load({str(tmp_path / 'want.npy')!r}))
        per_node = c(trees[:3], all_nodes=True)
        assert [len(p) for p in per_node] == [len(ct.data.postorder(t)) for t in trees[:3]]
        try:
            c([ct.data.Node(word=10 ** 6)])
            raise SystemExit("vocabulary bound not kept")
        except ValueError as err:
            assert "vocabulary" in str(err)
        new = dict(np.load({str(tmp_path / 'new.npz')!r}))
        f = ct.load({str(fc_path)!r}, weights=new)
        np.testing.assert_allclose(f(trees[:20]), np.load({str(tmp_path / 'want_fc.npy')!r}), atol=1e-4)
        import sys
        # the deploy side and the ground floor it stands on (docs/contributing.md); any other
        # package module is the compile side, a new one included
        deploy_side = {{"config", "data", "export", "flatten", "integrity", "kernel_args", "linearize",
                        "linearize_arrays", "node_features", "plan", "runtime", "signature", "target",
                        "torch_interop", "unrolled_levels", "version", "weights"}}
        loaded = [m for m in sys.modules if m.split(".")[0] == "cortex_tvm" and len(m.split(".")) > 1
                  and m.split(".")[1] not in deploy_side]
        print("outside the deploy side:", sorted(loaded))
        print("deploy side:", sorted({{m.split(".")[1] for m in sys.modules if m.startswith("cortex_tvm.")}}))
        print("compiles", ct.compile_count())
    """)
    assert "outside the deploy side: []" in out and "compiles 0" in out, out


def test_load_weights_validated(tmp_path):
    fc = ct.models.TreeFC(hidden_size=H, vocab_size=30)
    path = fc.compile().export(tmp_path / "fc")
    good = {k: v.copy() for k, v in fc.weights.items()}
    with pytest.raises(ValueError, match="missing weights"):
        ct.load(path, weights={"emb": good["emb"]})
    with pytest.raises(TypeError, match="dtype"):
        ct.load(path, weights={**good, "b": good["b"].astype(np.float64)})
    with pytest.raises(TypeError, match="dict"):
        ct.load(path, weights=[1, 2])
    aliased = {"emb.weight": good["emb"], "W.weight": good["W"], "W.bias": good["b"]}
    trees = random_trees(4, (1, 8), seed=1, vocab_size=30)
    np.testing.assert_allclose(ct.load(path, weights=aliased)(trees), fc.reference(trees), atol=1e-5)
    with pytest.raises(FileNotFoundError, match="not a directory"):
        ct.load(tmp_path / "nowhere")


# ------------------------------------------------------------------ memory

def test_10000_calls_do_not_grow_memory(sst):
    psutil = pytest.importorskip("psutil")
    model = ct.models.TreeFC(hidden_size=8, vocab_size=len(sst[1]))
    compiled = model.compile(schedule="none")
    batches = [sst[0][i:i + 3] for i in range(0, 30, 3)]
    for i in range(500):                                  # warm-up: workspaces, caches
        compiled(batches[i % len(batches)], all_nodes=(i % 7 == 0))
    proc = psutil.Process()
    before = proc.memory_info().rss
    for i in range(10_000):
        compiled(batches[i % len(batches)], all_nodes=(i % 7 == 0))
    after = proc.memory_info().rss
    assert after < before * 1.05, f"RSS grew from {before / 2**20:.1f} MiB to {after / 2**20:.1f} MiB"


def test_the_hoisted_table_read_is_clamped_in_the_kernel(sst):
    """Where a word may be missing (ChildSum reads words on inner nodes), the kernel's leaf-table
    read is clamped like index(): even run(check=False) on a leaf holding the marker reads a row
    of the table (finite states), not the row past its end."""
    model = ct.models.ChildSumTreeLSTM(hidden_size=H, vocab_size=len(sst[1]), max_children=4)
    compiled = model.compile()
    script = compiled.lowered.func.script()
    assert f"h_table[T.min(word[" in script and f", {len(sst[1]) - 1})" in script
    lin = compiled.linearize(sst[0][:3])
    words = lin.words.copy()
    words[1] = compiled.signature.no_word
    out, _ = compiled.run(replace(lin, words=words), check=False)
    assert np.isfinite(out).all()


def test_every_array_the_kernel_reads_is_cache_line_aligned(sst, fc):
    """numpy aligns to 16 bytes only; a packed weight at a 48-byte offset splits every other
    32-byte load across two cache lines (a 20-25% slower kernel, depending on the allocation)."""
    from cortex_tvm.runtime import ALIGN, aligned, aligned_empty
    for shape, dtype in (((3, 5), np.float32), ((7,), np.uint16), ((1000, 3), np.float32)):
        a = aligned_empty(shape, dtype)
        assert a.shape == shape and a.dtype == dtype and a.ctypes.data % ALIGN == 0 and a.flags.c_contiguous
    empty = aligned_empty((0, 4), np.float32)              # no bytes to align: only the shape matters
    assert empty.shape == (0, 4) and empty.dtype == np.float32
    odd = np.zeros(33, np.float32)[1:]                       # 4 bytes past an allocation
    assert aligned(odd).ctypes.data % ALIGN == 0 and np.array_equal(aligned(odd), odd)
    _, compiled = fc
    assert all(w.ctypes.data % ALIGN == 0 for w in compiled._weights)
    assert all(s.ctypes.data % ALIGN == 0 for s in compiled._state_buffers(100))
