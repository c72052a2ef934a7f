"""20 Adagrad steps of the SST recipe (a classifier on every node, cross-entropy at every node's
label), from the same initial weights: cortex_tvm's module against the float64 eager reference.
The loss must agree at every step, so the gradients and the weight updates reaching the kernel
(`load_weights` after each `optimizer.step()`) are right all along, not only at the start.

Also the example a user runs, `examples/train_sst.py`, end to end on a few bundled trees.
"""
import os
import subprocess
import sys

import numpy as np
import pytest

import cortex_tvm as ct

torch = pytest.importorskip("torch")

from .eager import EagerTreeLSTM  # noqa: E402 - needs torch

H, STEPS, BATCH = 16, 20, 6
EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "train_sst.py")


def _labels(trees):
    return torch.tensor([n.label for t in trees for n in ct.data.postorder(t)])


def _run(encoder_all_h, parameters, classifier, batches):
    optimizer = torch.optim.Adagrad([*parameters, *classifier.parameters()], lr=0.05, weight_decay=1e-4)
    losses = []
    for trees in batches:
        optimizer.zero_grad()
        states = encoder_all_h(trees)
        loss = torch.nn.functional.cross_entropy(classifier(states), _labels(trees))
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return np.array(losses)


def test_twenty_adagrad_steps_match_the_reference(sst):
    trees, vocab = sst
    batches = [trees[k * BATCH:(k + 1) * BATCH] for k in range(STEPS)]
    model = ct.models.TreeLSTM(H, len(vocab), seed=21)
    torch.manual_seed(0)
    head = torch.nn.Linear(H, 5)

    module = model.compile(training=True).as_torch()
    ours_head = torch.nn.Linear(H, 5)
    ours_head.load_state_dict(head.state_dict())
    ours = _run(lambda t: torch.cat(module(t, all_nodes=True)), module.parameters(), ours_head, batches)

    eager = EagerTreeLSTM(model.weights)
    ref_head = torch.nn.Linear(H, 5, dtype=torch.float64)
    ref_head.load_state_dict({k: v.double() for k, v in head.state_dict().items()})
    reference = _run(lambda t: torch.cat(eager(t)[1]), eager.parameters(), ref_head, batches)

    assert reference[-1] < reference[0]                      # it learns: the comparison means something
    np.testing.assert_allclose(ours, reference, rtol=1e-4, atol=0)


def test_the_training_example_runs_on_the_bundled_trees():
    env = dict(os.environ, TVM_NUM_THREADS="2")
    proc = subprocess.run([sys.executable, EXAMPLE, "--hidden", "16", "--embed", "16", "--epochs", "2",
                           "--max-trees", "60", "--batch", "10"], capture_output=True, text=True, env=env,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    epochs = [line for line in proc.stdout.splitlines() if line.startswith("epoch")]
    assert len(epochs) == 2 and all("trees/s" in e and "test accuracy" in e and "peak RSS" in e
                                    for e in epochs), proc.stdout
    assert "keeps 7 vectors of h per internal node and 5 per leaf" in proc.stdout
    loss = [float(e.split("loss ")[1].split(",")[0]) for e in epochs]
    assert loss[1] < loss[0], epochs
    assert "batches, loss" in proc.stderr                     # the progress bar
