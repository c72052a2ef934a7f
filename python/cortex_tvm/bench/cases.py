"""What each bench model runs on: the same structures in the orchestrator and in every worker.

Tree models run on the SST trees themselves; sequence models on each SST
sentence's words in order; DAG-RNN on a square image-grid DAG per tree
whose inputs are that sentence's words.  MV-RNN keeps a matrix per node, so
it runs at most at H=64, as in the literature.  Only TreeLSTM and TreeFC
have PyTorch/DGL baselines in the bench.
"""
from __future__ import annotations

import math

import numpy as np

from .. import data, models
from ..node_features import seeded_batch

#: bench name -> cortex_tvm.models class name (the zoo's own table, models.BY_NAME)
MODEL_CLASSES = {name: cls.__name__ for name, cls in models.BY_NAME.items()}
#: models the torch worker implements
TORCH_MODELS = ("treelstm", "treefc")
MVRNN_MAX_HIDDEN = 64


def hidden_for(name: str, hidden: int) -> int:
    return min(hidden, MVRNN_MAX_HIDDEN) if name == "mvrnn" else hidden


#: constructor options per bench model: SST parses carry words at leaves only, so the child-sum
#: cell leaves out its (all-zero) input term at inner nodes
OPTIONS = {"childsum": {"inner_words": False}}


#: models that take per-node feature vectors (`inputs="features"`) at a width of their own
FEATURE_MODELS = ("treelstm", "treegru", "childsum", "seqlstm", "seqgru", "dagrnn")
#: the seed of `bench --features`' rows
FEATURE_SEED = 23


#: models whose word vectors go through an input projection, so their width x may differ from H
EMBED_MODELS = FEATURE_MODELS


def make_model(name: str, hidden: int, vocab_size: int, features: int | None = None, embed: int | None = None):
    """The bench's model `name`; features=F: fed F features per node instead of word ids;
    embed=X: word vectors of width X (`EMBED_MODELS`; default H)."""
    if embed is not None and (features is not None or name not in EMBED_MODELS):
        raise ValueError(f"bench model {name!r}: embed={embed} is for {', '.join(EMBED_MODELS)} fed word ids")
    if features is not None:
        inputs = {"inputs": "features", "embed_size": features}
    else:
        inputs = {"vocab_size": vocab_size, **({} if embed is None else {"embed_size": embed})}
    return models.BY_NAME[name](hidden_size=hidden_for(name, hidden), **inputs, **OPTIONS.get(name, {}))


def feature_rows(groups, size: int) -> list:
    """`bench --features`' rows for each batch of structures (`node_features.seeded_batch`):
    (nodes, size) float32, the nodes in the order the models take them."""
    return [seeded_batch(g, size, seed=FEATURE_SEED + k).features for k, g in enumerate(groups)]


def structures(name: str, trees: list) -> list:
    """The structures `name` runs on, one per SST tree given."""
    if name in ("seqlstm", "seqgru"):
        return [data.sequence(_words(t)) for t in trees]
    if name == "dagrnn":
        out = []
        for t in trees:
            words = _words(t)
            side = max(1, math.isqrt(len(words)))
            grid = np.array(words[:side * side], dtype=np.int64).reshape(side, side)
            out.append(data.grid_dag(side, side, words=grid))
        return out
    return list(trees)


def _words(tree) -> list:
    return [n.word for n in data.postorder(tree) if n.children is None]
