"""The model zoo: each model is a short RA program plus its weight layout."""
from .base import Model
from .tree_fc import TreeFC
from .tree_lstm import TreeLSTM

__all__ = ["Model", "TreeFC", "TreeLSTM"]
