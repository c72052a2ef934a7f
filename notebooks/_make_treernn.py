"""Writes notebooks/treernn_explore.ipynb (outputs cleared). Run: python notebooks/_make_treernn.py"""
import nbformat as nbf

cells = []
md = lambda s: cells.append(nbf.v4.new_markdown_cell(s))  # noqa: E731
code = lambda s: cells.append(nbf.v4.new_code_cell(s))  # noqa: E731

md("""# TreeRNN from scratch: the recursive API, the linearizer and `dense_index`

This notebook writes the CORTEX paper's running example, TreeFC (a TreeRNN whose
internal nodes apply one matrix to the sum of their children), in cortex_tvm's
recursive API, draws a small batch of trees coloured by level next to the
linearizer's arrays, shows the TIR before and after `dense_index`, and checks
the compiled numbers against numpy.""")
code("""import os
os.environ.setdefault("TVM_NUM_THREADS", "2")
import numpy as np
import matplotlib
import matplotlib.pyplot as plt
import cortex_tvm as ct
from cortex_tvm import ra

SMALL = os.environ.get("CORTEX_NOTEBOOK_SMALL", "") == "1"   # the test runs with small settings
H, V = (16, 50) if SMALL else (64, 500)""")
md("""## 1. The model in the recursive API

A leaf's state is its word embedding; an internal node's state is
`tanh(W (h_left + h_right) + b)`.  Indexing a recursive state takes the node
first: `h[ra.child(n, 0), i]`.""")
code("""class TreeRNN(ct.models.Model):
    def __init__(self, hidden_size, vocab_size, seed=0):
        self.hidden_size, self.vocab_size = hidden_size, vocab_size
        super().__init__(seed)

    def weight_shapes(self):
        return {"emb": (self.vocab_size, self.hidden_size), "W": (self.hidden_size, self.hidden_size),
                "b": (self.hidden_size,)}

    def build_program(self):
        H, V = self.hidden_size, self.vocab_size
        tree, n = ra.Tree(max_children=2), ra.node()
        word = ra.node_input("word", bound=V)
        emb, W, b = ra.weight("emb", (V, H)), ra.weight("W", (H, H)), ra.weight("b", (H,))
        h = ra.rec_placeholder("h", (H,))
        leaf_h = ra.compute((H,), lambda i: emb[word[n], i], name="leaf_h")
        child_sum = ra.compute((H,), lambda i: h[ra.child(n, 0), i] + h[ra.child(n, 1), i], name="child_sum")
        k = ra.reduce_axis(H, "k")
        internal_h = ra.compute((H,), lambda i: ra.tanh(ra.sum(W[i, k] * child_sum[k], k) + b[i]), name="internal_h")
        return ra.rec_compute(tree, {h: (leaf_h, internal_h)})

    def numpy_forward(self, lin):
        w, lo = self.weights, lin.level_offsets
        h = np.zeros((lin.num_slots, self.hidden_size), np.float32)
        h[lo[0]:lo[1]] = w["emb"][lin.words[lo[0]:lo[1]]]
        for start, end in zip(lo[1:-1], lo[2:]):
            kids = lin.children[start:end]
            h[start:end] = np.tanh((h[kids[:, 0]] + h[kids[:, 1]]) @ w["W"].T + w["b"])
        return [h]

model = TreeRNN(H, V)""")
md("## 2. A small batch, coloured by level, and the linearizer's arrays")
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
md("""## 3. The IR before and after `dense_index`

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
md("## 4. Numbers against numpy")
code("""compiled = model.compile()
sst, vocab = ct.data.sst_sample()
sst = sst[: (20 if SMALL else 200)]
sst_model = TreeRNN(H, len(vocab))
sst_compiled = sst_model.compile()
worst = max(float(np.abs(sst_compiled(sst[i:i + 10]) - sst_model.reference(sst[i:i + 10])).max())
            for i in range(0, len(sst), 10))
print(f"max abs difference vs numpy on {len(sst)} SST trees: {worst:.2e}")
assert worst < 1e-4""")

nb = nbf.v4.new_notebook(cells=cells, metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}})
nbf.write(nb, "notebooks/treernn_explore.ipynb")
print("wrote notebooks/treernn_explore.ipynb")
