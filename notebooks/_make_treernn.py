"""Writes notebooks/treernn_explore.ipynb (outputs cleared). Run: python notebooks/_make_treernn.py"""
import nbformat as nbf

cells = []
md = lambda s: cells.append(nbf.v4.new_markdown_cell(s))  # noqa: E731
code = lambda s: cells.append(nbf.v4.new_code_cell(s))  # noqa: E731

md("""# TreeRNN from scratch: a plain recursive function, the linearizer and `dense_index`

This notebook writes the CORTEX paper's running example, TreeFC (a TreeRNN whose
internal nodes apply one matrix to the sum of their children), as an ordinary
recursive Python function with `@ct.recursive`, shows the recursive-API (RA)
program and the TIR it traces to, draws a small batch of trees coloured by level
next to the linearizer's arrays, shows the TIR before and after `dense_index`,
and checks the compiled numbers against numpy.""")
code("""import os
os.environ.setdefault("TVM_NUM_THREADS", "2")
import numpy as np
import matplotlib
import matplotlib.pyplot as plt
import cortex_tvm as ct
from cortex_tvm.frontend import TracedModel

SMALL = os.environ.get("CORTEX_NOTEBOOK_SMALL", "") == "1"   # the test runs with small settings
H, V = (16, 50) if SMALL else (64, 500)""")
md("""## 1. The model as a recursive function

A leaf's state is its word embedding; an internal node's state is
`tanh(W (h_left + h_right) + b)`.  The function is written the way a PyTorch
user writes a cell: `p` holds the weights by name, and the recursion is a call
of the function itself on a child.  `@ct.recursive` traces it, once for a leaf
and once for an internal node, into the recursive API.""")
code("""@ct.recursive
def tree_rnn(node, p):
    if node.is_leaf:
        return p.emb[node.word]
    left, right = tree_rnn(node.children[0], p), tree_rnn(node.children[1], p)
    return ct.tanh(p.W @ (left + right) + p.b)

def random_weights(vocab_size, seed=0):
    rng = np.random.default_rng(seed)
    return {"emb": rng.standard_normal((vocab_size, H)).astype(np.float32),
            "W": rng.uniform(-H ** -0.5, H ** -0.5, (H, H)).astype(np.float32),
            "b": rng.uniform(-H ** -0.5, H ** -0.5, H).astype(np.float32)}

model = TracedModel(tree_rnn, random_weights(V), max_children=2)   # what ct.compile builds first
model""")
md("""## 2. The RA program it traces to

One line per stage.  The leaf case reads the embedding row; the internal case
materializes the child sum (the input of the matrix-vector product) and then
computes `tanh(W child_sum + b)`.  Indexing a recursive state takes the node first,
`h[children[n, 0], i]`.  This is exactly the program the hand-written RA model
`ct.models.TreeFC` builds (README, "Writing a model").""")
code("""print(ct.frontend.ra_text(model.program))
assert ct.frontend.ra_text(model.program) == ct.frontend.ra_text(ct.models.TreeFC(H, V).program)""")
md("""## 3. The TIR it lowers to

Leaves get their own loop nest, then a serial loop over levels runs the
internal stage on every node of the level; `internal_h_sum` is the reduction
that lowering split out of `tanh(sum(...) + b)`.""")
code("""print(model.lower(specialize_leaves=True).func.script())""")
md("## 4. A small batch, coloured by level, and the linearizer's arrays")
code("""trees = ct.data.random_trees(3, (3, 6), seed=1, vocab_size=V)
lin = model.linearize(trees)
print("level_offsets:", lin.level_offsets)
print("children (slot -> child slots):")
for slot in range(lin.num_slots):
    print(f"  slot {slot:2d}: children {lin.children[slot].tolist()}  word {lin.words[slot]}")
print("roots:", lin.roots, " node_slots (post-order, per tree):", lin.node_slots)""")
code("""def draw(ax, tree, x0, slot_of, level_of, colors):
    nodes = ct.data.postorder(tree)
    pos, next_x = {}, [x0]
    for node in nodes:                       # post-order: children are placed before parents
        if node.children is None:
            pos[id(node)] = (next_x[0], 0); next_x[0] += 1
        else:
            xs = [pos[id(c)][0] for c in node.children]
            pos[id(node)] = (sum(xs) / len(xs), 1 + max(pos[id(c)][1] for c in node.children))
    for node in nodes:
        x, y = pos[id(node)]
        for c in node.children or []:
            ax.plot([x, pos[id(c)][0]], [y, pos[id(c)][1]], color="gray", zorder=1)
        slot = slot_of[id(node)]
        ax.scatter([x], [y], s=500, color=colors[level_of[slot]], zorder=2)
        ax.text(x, y, str(slot), ha="center", va="center", color="white", zorder=3)
    return next_x[0] + 1

slot_of = {}
flat = [node for t in trees for node in ct.data.postorder(t)]
for node, slot in zip(flat, lin.node_slots):
    slot_of[id(node)] = int(slot)
level_of = np.zeros(lin.num_slots, int)
for level, (a, b) in enumerate(zip(lin.level_offsets[:-1], lin.level_offsets[1:])):
    level_of[a:b] = level
colors = matplotlib.colormaps["viridis"](np.linspace(0, 0.9, lin.num_levels))
fig, ax = plt.subplots(figsize=(9, 3))
x = 0
for t in trees:
    x = draw(ax, t, x, slot_of, level_of, colors)
ax.set_title("nodes labelled by slot, coloured by level (leaves: level 0)")
ax.axis("off")
plt.show()""")
md("""## 5. The IR before and after `dense_index`

After lowering, the scratchpad `child_sum` is indexed by node id through the
level-offset array (`child_sum[level_offsets[l] + j, i]`, non-affine in the
loop variables) and has a row for every slot.  `dense_index` makes it affine
(`child_sum[j, i]`) and shrinks it to the largest level.""")
code("""rs = ct.RecSchedule(model.lower())
rs.specialize_leaves()
before = rs.show()
rs.dense_index("child_sum")
after = rs.show()
import difflib
print("\\n".join(difflib.unified_diff(before.splitlines(), after.splitlines(), lineterm="", n=0)))""")
md("""## 6. Numbers against numpy

`ct.compile` traces, lowers, schedules and builds in one call.  The reference is
the same recursion written eagerly in numpy, one node at a time.""")
code("""def numpy_tree_rnn(node, w):
    if node.is_leaf:
        return w["emb"][node.word]
    left, right = (numpy_tree_rnn(child, w) for child in node.children)
    return np.tanh(w["W"] @ (left + right) + w["b"])

sst, vocab = ct.data.sst_sample()
sst = sst[: (20 if SMALL else 200)]
w = random_weights(len(vocab), seed=1)
compiled = ct.compile(tree_rnn, weights=w, max_children=2, target="llvm")
roots = np.concatenate([compiled(sst[i:i + 10]) for i in range(0, len(sst), 10)])
expected = np.array([numpy_tree_rnn(tree, w) for tree in sst])
worst = float(np.abs(roots - expected).max())
print(f"max abs difference vs numpy on {len(sst)} SST trees: {worst:.2e}")
assert worst < 1e-4""")

nb = nbf.v4.new_notebook(cells=cells, metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}})
nbf.write(nb, "notebooks/treernn_explore.ipynb")
print("wrote notebooks/treernn_explore.ipynb")
