"""Structures the model tests share: random n-ary trees (optionally with words on inner nodes)
and SST trees with their word ids folded into a small vocabulary (small embedding tables)."""
import numpy as np

import cortex_tvm as ct
from cortex_tvm.data import Node


def nary_trees(count, max_children, seed, vocab, max_leaves=20, word_prob=0.0):
    """Random trees of 1..max_children children per inner node; an inner node has a word with
    probability word_prob."""
    rng = np.random.default_rng(seed)
    trees = []
    for _ in range(count):
        items = [Node(word=int(w)) for w in rng.integers(0, vocab, int(rng.integers(1, max_leaves)))]
        while len(items) > 1:
            k, i = int(rng.integers(1, max_children + 1)), int(rng.integers(0, len(items)))
            word = int(rng.integers(0, vocab)) if rng.random() < word_prob else None
            items[i:i + k] = [Node(word=word, children=items[i:i + k])]
        trees.append(items[0])
    return trees


def sst(count, vocab):
    """The first `count` bundled SST trees, words folded into `vocab`."""
    trees, _ = ct.data.sst_sample()
    return [ct.data.fold_words(t, vocab) for t in trees[:count]]


def word_lists(count, seed, vocab, max_len=25):
    rng = np.random.default_rng(seed)
    return [[int(w) for w in rng.integers(0, vocab, int(rng.integers(1, max_len)))] for _ in range(count)]
