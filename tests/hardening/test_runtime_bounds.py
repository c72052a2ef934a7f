"""What the kernel reads: the bounds-checked build, run()'s validation of hand-edited arrays, a
leaf without a word where leaves are table lookups, the clamped table read, and cache-line aligned
arrays."""
from dataclasses import replace

import numpy as np
import pytest

import cortex_tvm as ct

from runtime_util import H


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


def test_the_hoisted_table_read_is_clamped_in_the_kernel(sst):
    """Where a word may be missing (ChildSum reads words on inner nodes), the kernel's leaf-table
    read is clamped like index(): even run(check=False) on a leaf holding the marker reads a row
    of the table (finite states), not the row past its end."""
    model = ct.models.ChildSumTreeLSTM(hidden_size=H, vocab_size=len(sst[1]), max_children=4)
    compiled = model.compile()
    script = compiled.lowered.func.script()
    assert "h_table[T.min(word[" in script and f", {len(sst[1]) - 1})" in script
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
