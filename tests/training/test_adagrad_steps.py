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
from cortex_tvm import dot_bf16
from cortex_tvm.target import host_features

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


def _example(*options):
    """(returncode, stdout, stderr, [each epoch's loss]) of examples/train_sst.py on 60 bundled trees."""
    env = dict(os.environ, TVM_NUM_THREADS="2")
    proc = subprocess.run([sys.executable, EXAMPLE, "--hidden", "16", "--embed", "16", "--epochs", "2",
                           "--max-trees", "60", "--batch", "10", *options], capture_output=True, text=True, env=env,
                          timeout=300)
    epochs = [line for line in proc.stdout.splitlines() if line.startswith("epoch")]
    return proc, epochs, [float(e.split("loss ")[1].split(",")[0]) for e in epochs]


@pytest.fixture(scope="module")
def float32_example():
    return _example()


def test_the_training_example_runs_on_the_bundled_trees(float32_example):
    proc, epochs, loss = float32_example
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert len(epochs) == 2 and all("trees/s" in e and "test accuracy" in e and "peak RSS" in e
                                    for e in epochs), proc.stdout
    assert "keeps 7 vectors of h per internal node and 5 per leaf" in proc.stdout
    assert loss[1] < loss[0], epochs
    assert "batches, loss" in proc.stderr                     # the progress bar


def test_the_training_example_trains_in_bf16_or_says_why_not(float32_example):
    """--precision bf16: on a CPU with AVX512_BF16 the same epochs, their losses within bf16's
    rounding of float32's; on one without, exit status 2 and a message naming the feature."""
    proc, epochs, loss = _example("--precision", "bf16")
    if dot_bf16.FEATURE not in host_features():
        assert proc.returncode == 2 and "avx512bf16" in proc.stderr and not epochs, proc.stderr[-3000:]
        return
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "x=16 (bf16)" in proc.stdout and len(epochs) == 2, proc.stdout
    assert loss[1] < loss[0], epochs
    reference = float32_example[2]
    assert np.allclose(loss, reference, rtol=2e-2), (loss, reference)
