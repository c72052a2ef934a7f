"""A bench case's shared data: the .npz every worker of one (model, H, batch) reads (weights,
batches, useful FLOPs; flat arrays for the standalone torch worker; `--train`'s loss direction),
and the float64 references the orchestrator checks the workers against."""
from __future__ import annotations

import json

import numpy as np

from .. import data
from ..models import reference64
from .cases import EMBED_MODELS, TORCH_MODELS, feature_rows, structures
from .check import difference_grads64, torch_grads64
from .common import GRAD_WEIGHT, TRAIN_SEED, batch_starts

def case_groups(name, trees, batch, batches):
    """(the SST tree index of every batch's trees, flat; the structures of each batch)."""
    starts = batch_starts(len(trees), batch, batches)
    index = np.array([s + k for s in starts for k in range(batch)], np.int64)
    groups = [structures(name, [trees[i] for i in index[k:k + batch]]) for k in range(0, len(index), batch)]
    return index, groups


def train_direction(batch, hidden):
    """`--train`'s fixed loss direction R, (batch, hidden) float32: loss = sum(roots * R)."""
    return np.random.default_rng([TRAIN_SEED, batch, hidden]).standard_normal((batch, hidden)).astype(np.float32)


def write_case(path, model, name, trees, batch, batches, train=False, features=None, optimizer=None):
    """The npz for one (model, H, batch); returns (mean useful FLOPs per batch, mean nodes per batch,
    the float64 reference roots of every batch, (batches, B, *state)).

    Binary-tree models also get flat post-order arrays (word/left/right) for
    the standalone torch worker; other models run on `cases.structures`.
    train=True: also the loss direction d_roots (`train_direction`) and grad_weight, the name
    of the weight whose gradient the workers write; optimizer (a dict, `common.TRAIN_OPTIMIZER`),
    as JSON: the optimizer step each timed training step ends in.
    features=F: every node's F features (`cases.feature_rows`), all batches' rows in one array
    `features` split by `feature_offsets`; the torch worker reads them as its embedding table,
    each leaf's word being its row (the same gather a per-node-features PyTorch model does).
    """

    index, groups = case_groups(name, trees, batch, batches)
    arrays = _torch_arrays([trees[i] for i in index]) if name in TORCH_MODELS else {}
    rows, weights = None, dict(model.weights)
    if features is not None:
        rows = feature_rows(groups, features)
        arrays.update(features=np.concatenate(rows), feature_offsets=np.cumsum([0] + [len(r) for r in rows]))
        if "word" in arrays:
            arrays["word"] = np.where(arrays["word"] >= 0, np.arange(len(arrays["word"])), -1)
            weights["emb"] = arrays["features"]
    if train:
        arrays.update(d_roots=train_direction(batch, model.hidden_size), grad_weight=np.array(GRAD_WEIGHT[name]))
        if optimizer is not None:
            arrays["optimizer"] = np.array(json.dumps(optimizer))
    flops = [model.flops(model.linearize(g)) for g in groups]        # pad=1: real nodes only
    nodes = sum(len(data.dag_postorder(t)) for g in groups for t in g) / len(groups)
    if name in EMBED_MODELS and features is None:       # (the workers build the model at this width)
        arrays["embed"] = np.array(model.embed_size)
    np.savez(path, model=np.array(name), hidden=np.array(model.hidden_size), batch=np.array(batch),
             tree_index=index, flops=np.array(flops), **arrays, **{"w_" + k: v for k, v in weights.items()})
    refs = [reference64(model, g) if rows is None else reference64(model, g, features=rows[k])
            for k, g in enumerate(groups)]
    return float(np.mean(flops)), nodes, np.stack(refs)


def reference_grads(model, name, groups, d_roots, ref_roots, use_torch):
    """The float64 reference gradient of GRAD_WEIGHT[name] per batch, for `check.check_grads`:
    PyTorch autograd through an eager per-node recursion (its roots must equal `ref_roots`, the
    `reference64` ones, to 1e-9), or (use_torch False) central differences of `reference64`."""
    weight = GRAD_WEIGHT[name]
    base = {"weight": weight, "shape": tuple(model.weights[weight].shape)}
    if use_torch:
        roots, grads = torch_grads64(name, model.weights, groups, d_roots, weight)
        err = float(np.max(np.abs(roots - ref_roots)))
        if not err <= 1e-9 * max(1.0, float(np.max(np.abs(ref_roots)))):
            raise RuntimeError(f"bench --train: the float64 PyTorch reference of {name} disagrees with "
                               f"models.reference64 by {err:.3g} (a harness bug)")
        return {**base, "method": "float64 PyTorch autograd, eager per-node recursion", "index": None, "ref": grads}
    index, values = difference_grads64(model, groups, d_roots, weight, reference64)
    return {**base, "method": f"central differences of models.reference64 at {len(index)} sampled entries",
            "index": index, "ref": values}


def _torch_arrays(trees) -> dict:
    """Flat post-order word/left/right/height arrays of binary trees, and per-tree offsets."""

    words, lefts, rights, heights, offsets = [], [], [], [], [0]
    for i, tree in enumerate(trees):
        nodes = data.postorder(tree)
        pos = {id(n): k for k, n in enumerate(nodes)}
        n = len(nodes)
        word, left, right = (np.full(n, -1, np.int64) for _ in range(3))
        height = np.zeros(n, np.int64)
        for k, node in enumerate(nodes):
            if node.children is None:
                word[k] = node.word
            else:
                if len(node.children) != 2:
                    raise ValueError(f"tree {i}: the torch baselines need binary trees "
                                     f"(a node has {len(node.children)} children)")
                left[k], right[k] = pos[id(node.children[0])], pos[id(node.children[1])]
                height[k] = 1 + max(height[left[k]], height[right[k]])
        words.append(word), lefts.append(left), rights.append(right), heights.append(height)
        offsets.append(offsets[-1] + n)
    return {"word": np.concatenate(words), "left": np.concatenate(lefts), "right": np.concatenate(rights),
            "height": np.concatenate(heights), "tree_offsets": np.array(offsets, np.int64)}
