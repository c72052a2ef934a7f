"""Many calls of one compiled model: eight threads at once (equal to serial calls, the first call
of a fresh model included) and 10000 calls in a row without memory growth."""
import threading

import numpy as np
import pytest

import cortex_tvm as ct
from cortex_tvm.data import Node

from runtime_util import H


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
