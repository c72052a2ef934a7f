"""`scratch`: working arrays kept between calls, and results reused once their caller lets go."""
import numpy as np

from cortex_tvm.scratch import Recycled, aligned_zeros, held_rows


def test_a_result_let_go_is_reused_and_zeroed():
    pool = Recycled()
    first = pool.zeros("U", (3, 4))
    first += 7
    address = first.ctypes.data
    del first
    again = pool.zeros("U", (3, 4))
    assert again.ctypes.data == address
    assert not again.any()


def test_a_result_still_held_is_never_reused():
    pool = Recycled()
    held = pool.zeros("U", (3, 4))
    held += 7
    view = pool.zeros("W", (2,))[:1]                # only a view of it is kept
    fresh = pool.zeros("U", (3, 4))
    assert fresh.ctypes.data != held.ctypes.data and (held == 7).all() and not fresh.any()
    view += 5
    other = pool.zeros("W", (2,))
    assert other.ctypes.data != view.ctypes.data and view[0] == 5


def test_a_new_shape_gets_a_new_array():
    pool = Recycled()
    a = pool.zeros("U", (3, 4))
    del a
    assert pool.zeros("U", (4, 3)).shape == (4, 3)


def test_held_rows_grow_and_keep_their_row_shape():
    held = {}
    a = held_rows(held, "x", 5, (3,))
    assert a.shape == (5, 3)
    assert held_rows(held, "x", 4, (3,)).ctypes.data == a.ctypes.data      # fewer rows: the same array
    grown = held_rows(held, "x", 6, (3,))
    assert grown.shape == (6, 3) and held["x"].shape[0] == 10                  # doubled
    assert held_rows(held, "x", 2, (4,)).shape == (2, 4)                       # another row shape


def test_an_array_the_caller_cleaned_is_reused_without_a_memset():
    """`zeroed`: the caller zeroed what it wrote (an embedding gradient's few rows); the next
    call trusts it once (here the caller lies, to show that nothing cleared it), then clears again."""
    pool = Recycled()
    grad = pool.zeros("emb", (6, 2))
    grad[4] = 3
    del grad
    pool.zeroed("emb")
    trusted = pool.zeros("emb", (6, 2))
    assert trusted[4].tolist() == [3, 3] and not np.delete(trusted, 4, axis=0).any()
    del trusted
    assert not pool.zeros("emb", (6, 2)).any()                    # the mark held for one call


def test_empty_reuses_a_result_let_go_without_zeroing_it():
    """`empty`: for a caller that writes every element (a compiled sum into a gradient): the memory
    of a result let go, as it was; a result still held is never handed out again."""
    pool = Recycled()
    first = pool.empty("U", (3, 4))
    first[...] = 7
    address = first.ctypes.data
    del first
    again = pool.empty("U", (3, 4))
    assert again.ctypes.data == address and (again == 7).all()
    fresh = pool.empty("U", (3, 4))
    assert fresh.ctypes.data != again.ctypes.data and (again == 7).all()
    del again, fresh
    assert not pool.zeros("U", (3, 4)).any()                    # zeros after empty: zeroed


def test_aligned_zeros_start_on_a_cache_line():
    """numpy's own arrays start 16 bytes into a line here; these start on one, whatever the shape."""
    for shape in [(300, 800), (7,), (3, 5, 2)]:
        array = aligned_zeros(shape)
        assert array.shape == shape and array.dtype == np.float32 and array.flags.c_contiguous
        assert array.ctypes.data % 64 == 0 and not array.any()

