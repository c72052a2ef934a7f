"""Traced cells (`@ct.recursive`) the training tests compile."""
import cortex_tvm as ct


@ct.recursive
def tree_fc(node, p):
    """TreeFC's equations (`ct.models.TreeFC`'s weights emb, W, b)."""
    if node.is_leaf:
        return p.emb[node.word]
    return ct.tanh(p.W @ (tree_fc(node.children[0], p) + tree_fc(node.children[1], p)) + p.b)
