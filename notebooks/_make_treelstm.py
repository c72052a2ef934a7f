"""Writes notebooks/treelstm_schedules.ipynb (outputs cleared). Run: python notebooks/_make_treelstm.py"""
import nbformat as nbf

cells = []
md = lambda s: cells.append(nbf.v4.new_markdown_cell(s))  # noqa: E731
code = lambda s: cells.append(nbf.v4.new_code_cell(s))  # noqa: E731

md("""# Exploring TreeLSTM schedules

TreeLSTM from the model zoo, scheduled step by step with the recursive
primitives of `RecSchedule`: the TIR after each primitive and the latency
each step buys; latency against batch size next to the baselines; a heat map
of recursion unrolling by tile size; and a short auto-tuning run that writes
a log and plots its tuning curve.

Timings on a shared machine are noisy: read ratios, not absolute numbers.
`CORTEX_NOTEBOOK_SMALL=1` (used by the tests) shrinks every size.""")
code("""import os
os.environ.setdefault("TVM_NUM_THREADS", str(os.cpu_count()))
import difflib
import numpy as np
import matplotlib.pyplot as plt
import cortex_tvm as ct
from cortex_tvm import recipes, tune
from cortex_tvm.timing import mean_of_best

SMALL = os.environ.get("CORTEX_NOTEBOOK_SMALL", "") == "1"
H = 32 if SMALL else 256
N_BATCHES, REPEATS = (2, 2) if SMALL else (10, 10)
trees, vocab = ct.data.sst_sample()
model = ct.models.TreeLSTM(hidden_size=H, vocab_size=len(vocab))
batches = [trees[i:i + 10] for i in range(0, 30 * N_BATCHES, 30)]
target = ct.make_target("llvm")
print(f"TreeLSTM H={H}, {len(batches)} batches of 10 SST trees")""")
md("""## 1. The primitives one by one

The default schedule is derived from the program and this CPU
(`cortex_tvm/policy/derive.py`); its trace is a list of named primitives,
replayed here one step at a time.  After each step: what changed in the TIR, and the end-to-end
latency of the program scheduled so far (with the same numbers as numpy).""")
code("""from cortex_tvm.build import schedule_model
from cortex_tvm.policy.padding import padded_model
padded = padded_model(model, target)       # sizes padded to the vector width (none at H=32/256)
scheduled, recipe = schedule_model(padded, target)
steps = [step.as_json() for step in scheduled.trace]
print("schedule", recipe.name, recipe.knob_values())

def prefix(k):
    return recipes.Recipe(f"first {k} steps", tuple(steps[:k]))

rs = ct.RecSchedule(padded.lower())
before = rs.func.script()
latency = {}
for k, step in enumerate(steps, start=1):
    done = len(rs.trace)
    recipes.Recipe("step", (step,)).apply(rs)
    if len(rs.trace) == done:
        continue                                  # an optional step that does not apply here
    label = step["primitive"] + "(" + ", ".join(f"{a}={v!r}" for a, v in step.get("args", {}).items()) + ")"
    after = rs.func.script()
    diff = [l for l in difflib.unified_diff(before.splitlines(), after.splitlines(), lineterm="", n=0)
            if l.startswith(("+", "-")) and not l.startswith(("+++", "---"))]
    compiled = model.compile(schedule=prefix(k))
    err = max(float(np.abs(compiled(b) - model.reference(b)).max()) for b in batches)
    latency[label] = mean_of_best(compiled, batches, REPEATS)
    print(f"== {label}: {latency[label] * 1e3:.3f} ms, max |diff| vs numpy {err:.1e}, {len(diff)} TIR lines changed")
    print("\\n".join(line[:160] for line in diff[:12]))
    before = after""")
code("""fig, ax = plt.subplots(figsize=(8, 4))
labels = list(latency)
ax.barh(range(len(labels)), [latency[l] * 1e3 for l in labels])
ax.set_yticks(range(len(labels)), [l[:48] for l in labels])
ax.invert_yaxis(); ax.set_xscale("log"); ax.set_xlabel("ms per batch of 10 (log)")
ax.set_title("latency after each primitive")
plt.tight_layout(); plt.show()""")
md("""## 2. Latency against batch size

Ours (default recipe) next to the numpy executor that batches by level (the
package's own baseline) and, when installed, PyTorch batched by height.
`cortex-tvm bench` does this properly: every system in its own process.""")
code("""compiled = model.compile()
sizes = [1, 4, 10] if SMALL else [1, 4, 10, 32, 64]
ours, numpy_levels = [], []
for B in sizes:
    bs = [trees[i:i + B] for i in range(0, min(len(trees) - B, 300), max(B, 30))][:N_BATCHES]
    ours.append(mean_of_best(compiled, bs, REPEATS))
    numpy_levels.append(mean_of_best(model.reference, bs, REPEATS))
fig, ax = plt.subplots(figsize=(6, 4))
ax.plot(sizes, np.array(ours) * 1e3, "o-", label="cortex_tvm")
ax.plot(sizes, np.array(numpy_levels) * 1e3, "s-", label="numpy, batched by level")
ax.set_xlabel("trees per batch"); ax.set_ylabel("ms per batch"); ax.set_xscale("log"); ax.set_yscale("log")
ax.legend(); ax.set_title("end-to-end latency"); plt.show()""")
md("## 3. Recursion unrolling by node tile (rows of the register tile)")
code("""depths = [1, 2] if SMALL else [1, 2, 3]
tiles = recipe.knobs["node_tile"][:2 if SMALL else 3]
heat = np.zeros((len(depths), len(tiles)))
for i, depth in enumerate(depths):
    for j, tile in enumerate(tiles):
        config = recipe.with_knobs(unroll_depth=depth, node_tile=tile)
        heat[i, j] = mean_of_best(model.compile(schedule=config), batches, REPEATS) * 1e3
fig, ax = plt.subplots(figsize=(5, 3.5))
im = ax.imshow(heat, cmap="viridis")
ax.set_xticks(range(len(tiles)), tiles); ax.set_yticks(range(len(depths)), depths)
ax.set_xlabel("node tile (nodes per register tile)"); ax.set_ylabel("unroll_levels depth")
for (i, j), v in np.ndenumerate(heat):
    ax.text(j, i, f"{v:.2f}", ha="center", va="center", color="w")
fig.colorbar(im, label="ms per batch"); plt.show()""")
md("""## 4. A short tuning run

The XGBoost-guided tuner searches the recipe's knobs and appends every trial
to a JSON-lines log; `model.compile(tuning_log=...)` then uses the best.""")
code("""log = "notebook_tuning.jsonl"
if os.path.exists(log):
    os.remove(log)
best = tune.tune(model, trials=4 if SMALL else 16, log=log, repeats=2 if SMALL else 5,
                 max_batches=N_BATCHES, progress=False)
from cortex_tvm.tune.database import load_records
means = [r.mean * 1e3 for r in load_records(log)]        # failed trials measure as inf
best_so_far = np.minimum.accumulate(means)
fig, ax = plt.subplots(figsize=(6, 3.5))
ax.plot(range(1, len(means) + 1), means, "o", alpha=0.5, label="trial")
ax.plot(range(1, len(means) + 1), best_so_far, "-", label="best so far")
ax.set_xlabel("trial"); ax.set_ylabel("ms per batch"); ax.legend(); ax.set_title("tuning curve"); plt.show()
print("best knobs:", best)
tuned = model.compile(tuning_log=log)
print("tuned:", mean_of_best(tuned, batches, REPEATS) * 1e3, "ms; default:", mean_of_best(compiled, batches, REPEATS) * 1e3, "ms")""")

md("""## 5. Training: the loss curve against PyTorch

`model.compile(training=True).as_torch()` holds the weights as torch parameters; its backward is
generated from the RA program (`cortex_tvm/adjoint.py`).  The SST recipe (a classifier on every
node, cross-entropy at every node's label, Adagrad) runs on it and on a TreeLSTM written by
recursion in PyTorch, from the same weights: the two loss curves lie on each other.""")
code("""import time
import torch

class EagerTreeLSTM(torch.nn.Module):
    def __init__(self, weights):
        super().__init__()
        for name, w in weights.items():
            self.register_parameter(name, torch.nn.Parameter(torch.tensor(w)))
    def node(self, n, out):
        if n.children is None:
            i, o, u = (self.W @ self.emb[n.word] + self.bW).chunk(3)
            c = torch.sigmoid(i) * torch.tanh(u)
        else:
            (hl, cl), (hr, cr) = (self.node(k, out) for k in n.children)
            i, fl, fr, o, u = (self.U @ torch.cat([hl, hr]) + self.bU).chunk(5)
            c = torch.sigmoid(i) * torch.tanh(u) + torch.sigmoid(fl) * cl + torch.sigmoid(fr) * cr
        h = torch.sigmoid(o) * torch.tanh(c)
        out.append(h)
        return h, c
    def forward(self, trees, all_nodes=True):
        out = []
        for t in trees:
            self.node(t, out)
        return [torch.stack(out)]

def train(encoder, steps, batch):
    torch.manual_seed(0)
    head = torch.nn.Linear(model.hidden_size, 5)
    optimizer = torch.optim.Adagrad([*encoder.parameters(), *head.parameters()], lr=0.05, weight_decay=1e-4)
    losses, start = [], time.perf_counter()
    for k in range(steps):
        chunk = trees[k * batch:(k + 1) * batch]
        labels = torch.tensor([n.label for t in chunk for n in ct.data.postorder(t)])
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(head(torch.cat(encoder(chunk, all_nodes=True))), labels)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return np.array(losses), (time.perf_counter() - start) / steps

steps, batch = (6, 4) if SMALL else (30, 10)
ours, ours_step = train(model.compile(training=True).as_torch(), steps, batch)
reference, ref_step = train(EagerTreeLSTM(model.weights), steps, batch)
fig, ax = plt.subplots(figsize=(6, 3.5))
ax.plot(reference, "o-", label=f"PyTorch, by recursion ({ref_step * 1e3:.0f} ms per step)")
ax.plot(ours, "x--", label=f"cortex_tvm ({ours_step * 1e3:.0f} ms per step)")
ax.set_xlabel("Adagrad step"); ax.set_ylabel("cross-entropy, every node"); ax.legend(); plt.show()
print("largest relative difference of the losses:", float(np.abs(ours / reference - 1).max()))""")

nb = nbf.v4.new_notebook(cells=cells, metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}})
nbf.write(nb, "notebooks/treelstm_schedules.ipynb")
print("wrote notebooks/treelstm_schedules.ipynb")
