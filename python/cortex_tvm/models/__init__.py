"""The model zoo: each model is a short RA program plus its weight layout."""
from .base import Model
from .child_sum_tree_lstm import ChildSumTreeLSTM
from .dag_rnn import DAGRNN
from .mv_rnn import MVRNN
from .program import ProgramModel
from .seq_rnn import SeqGRU, SeqLSTM
from ..ra import DAG
from .float64_walk import reference64
from .tree_fc import TreeFC
from .tree_gru import TreeGRU
from .tree_lstm import TreeLSTM

#: the zoo by short name: the one table the CLI, the bench and the tuner read
BY_NAME = {"treelstm": TreeLSTM, "treefc": TreeFC, "treegru": TreeGRU, "childsum": ChildSumTreeLSTM,
           "mvrnn": MVRNN, "dagrnn": DAGRNN, "seqlstm": SeqLSTM, "seqgru": SeqGRU}

__all__ = ["Model", "TreeFC", "TreeLSTM", "TreeGRU", "ChildSumTreeLSTM", "MVRNN", "DAGRNN",
           "SeqLSTM", "SeqGRU", "DAG", "BY_NAME", "reference64", "ProgramModel"]
