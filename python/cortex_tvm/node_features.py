"""Per-node feature rows (`ra.node_features`) laid out in the kernel's slot order.

A caller gives one float32 row per node, in the order the batch names its nodes:
for Nodes, trees in batch order and each tree in post-order (`data.postorder`; a DAG
model's in `data.dag_postorder`: the order of `all_nodes=True` results); for parent
arrays, node order.  The kernel
reads row `slot` of a (num_slots, F) array, so the rows are scattered to their
slots once per call (`lin.node_slots`), with zeros at the null slot and padding.

    lin = linearize(trees, 2)                 # node_slots: the slot of each node, in that order
    rows = slot_rows(X, lin, 768, "x")        # rows[lin.node_slots[i]] == X[i]; row 0 stays 0
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from .data.node import dag_postorder
from .weights import from_torch

__all__ = ["slot_rows", "with_slot_rows", "as_rows", "check_slot_rows", "FeaturedBatch", "with_features",
           "seeded_batch"]


def as_rows(features, size: int, name: str = "features") -> np.ndarray:
    """One (nodes, size) float32 array from an array, a torch tensor or a list of per-tree arrays.

    TypeError for a dtype other than float32; ValueError for a wrong shape or a
    value that is not finite (naming the node)."""
    if isinstance(features, (list, tuple)):
        if not features:
            raise ValueError(f"{name}: an empty list (give one (nodes, {size}) array per tree, or one for the batch)")
        parts = [as_rows(part, size, f"{name}[{i}]") for i, part in enumerate(features)]
        return np.concatenate(parts) if len(parts) > 1 else parts[0]
    features = from_torch(features)
    if not isinstance(features, np.ndarray):
        raise TypeError(f"{name}: expected a float32 numpy array (nodes, {size}), got {type(features).__name__}")
    if features.dtype != np.float32:
        raise TypeError(f"{name}: dtype is {features.dtype}, expected float32 (convert with .astype(np.float32))")
    if features.ndim != 2 or features.shape[1] != size:
        raise ValueError(f"{name}: shape {features.shape}, expected (nodes, {size}): one row of {size} "
                         "features per node")
    bad = ~np.isfinite(features)
    if bad.any():
        node = int(bad.any(axis=1).argmax())
        raise ValueError(f"{name}: node {node} has a feature that is not finite "
                         f"({features[node][bad[node]][0]!r}); NaN or inf would spread through its ancestors")
    return features


def slot_rows(features, lin, size: int, name: str = "features") -> np.ndarray:
    """(lin.num_slots, size) float32: node i's row of `features` at slot lin.node_slots[i], zeros
    elsewhere; ValueError when `features` does not have exactly one row per node."""
    rows = as_rows(features, size, "features")
    nodes = int(lin.node_slots.shape[0])
    if rows.shape[0] != nodes:
        raise ValueError(f"features: {rows.shape[0]} rows for a batch of {nodes} nodes (the model's "
                         f"{name!r} needs one row per node, trees in batch order, each in post-order)")
    out = np.zeros((lin.num_slots, size), np.float32)
    out[lin.node_slots] = rows
    return out


def with_slot_rows(lin, features, name: str, size: int):
    """`lin` with its `features` (`slot_rows`): the layout a kernel that reads `name` takes."""
    return replace(lin, features=slot_rows(features, lin, size, name))


def check_slot_rows(lin, name: str, size: int, dtype: str = "float32") -> None:
    """ValueError unless `lin.features` is the C-contiguous (num_slots, size) array a kernel reads
    row by slot (checked before every run: a short array would be read past its end)."""
    rows = getattr(lin, "features", None)
    if (type(rows) is not np.ndarray or rows.dtype != np.dtype(dtype) or not rows.flags.c_contiguous
            or rows.shape != (lin.num_slots, size)):
        got = None if rows is None else (getattr(rows, "shape", None), getattr(rows, "dtype", None))
        raise ValueError(f"run: this model reads per-node features {name!r}: lin.features must be a "
                         f"C-contiguous {dtype} array ({lin.num_slots}, {size}) in slot order, got {got} "
                         "(linearize with features= lays it out)")


class FeaturedBatch(list):
    """A batch of structures carrying its per-node feature rows (`features`, (nodes, F), in the
    order a model takes them), where code that runs batches knows nothing of features: the
    tuner's measurements, the bench's workers.  Call through `with_features`."""

    def __init__(self, structures, features):
        super().__init__(structures)
        self.features = features


def with_features(fn):
    """fn(batch) for any batch: a FeaturedBatch's rows go in as features=, other batches as they are."""
    def call(batch):
        if isinstance(batch, FeaturedBatch):
            return fn(list(batch), features=batch.features)
        return fn(batch)
    return call


def seeded_batch(structures, size: int, seed: int = 0) -> FeaturedBatch:
    """`structures` with seeded N(0, 1) float32 rows of `size` features per node (each structure in
    `data.dag_postorder` order): timing does not depend on the values a kernel reads."""
    count = sum(len(dag_postorder(s)) for s in structures)
    rows = np.random.default_rng([seed, size, count]).standard_normal((count, size)).astype(np.float32)
    return FeaturedBatch(structures, rows)
