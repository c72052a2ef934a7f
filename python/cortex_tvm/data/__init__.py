"""Trees for recursive models: the ``Node`` type, treebank readers and structure generators.

| module | job |
|---|---|
| ``node`` | ``Node`` (a word, children, or both), the mutation epoch, postorder traversals |
| ``ptb`` | bracketed treebanks (Penn Treebank, SST) and the bundled SST dev trees |
| ``conllu`` | CoNLL-U (Universal Dependencies) dependency trees and the bundled sample |
| ``generate`` | random binary trees, deep chains, sequences, image-grid DAGs |
| ``arrays`` | parent arrays and edge lists (networkx, PyG, DGL) to ``Node`` structures |
"""

from .arrays import from_dgl, from_edges, from_parents

from .conllu import conllu_sample, load_conllu, parse_conllu
from .generate import (chain_tree, fold_words, grid_dag, random_trees, sequence, sequence_positions, sequences,
                       treebank_like)
from .node import Node, _is_int, current_epoch, dag_postorder, postorder
from .ptb import load_ptb, parse_ptb, sst_sample

__all__ = [
    "fold_words",
    "Node",
    "current_epoch",
    "postorder",
    "dag_postorder",
    "parse_ptb",
    "load_ptb",
    "sst_sample",
    "treebank_like",
    "parse_conllu",
    "load_conllu",
    "conllu_sample",
    "random_trees",
    "chain_tree",
    "sequence",
    "sequences",
    "sequence_positions",
    "grid_dag",
    "from_parents",
    "from_dgl",
    "from_edges",
]
