"""Sizes, trees, random feature rows and checks shared by the test_node_features_*.py files."""
import numpy as np

import cortex_tvm as ct
from cortex_tvm.data import postorder, sst_sample

M = ct.models
H, F = 24, 20
TREES = sst_sample()[0][:6]


def rows_for(structures, size, seed=0, order=postorder):
    """Seeded float32 rows, one per node of `structures` (counted by `order`), `size` wide."""
    count = sum(len(order(s)) for s in structures)
    return np.random.default_rng(seed).standard_normal((count, size)).astype(np.float32)


def close(out, ref, tol=1e-4):
    """`out` is within `tol` of `ref`, relative to ref's largest magnitude (absolute below 1)."""
    err = np.max(np.abs(out - ref)) / max(1.0, np.max(np.abs(ref)))
    assert err < tol, err


def preorder_forest(trees):
    """The forest as a parent array in another order than the Nodes' post-order: trees reversed,
    each in pre-order (siblings keep their order, so it is the same forest); and perm, where
    node k of the arrays is node perm[k] of the post-order listing."""
    post, offset = {}, 0
    for tree in trees:
        for k, n in enumerate(postorder(tree)):
            post[id(n)] = offset + k
        offset += len(postorder(tree))
    order, parent_of = [], {}
    for tree in reversed(trees):
        stack = [tree]
        while stack:
            n = stack.pop()
            order.append(n)
            for c in n.children or ():
                parent_of[id(c)] = n
            stack.extend(reversed(n.children or ()))
    position = {id(n): k for k, n in enumerate(order)}
    parents = np.array([position[id(parent_of[id(n)])] if id(n) in parent_of else -1 for n in order])
    return parents, np.array([post[id(n)] for n in order])
