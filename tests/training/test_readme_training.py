"""The README's Training block runs as written, and its gradients are the ones `vjp` promises."""
import pathlib
import re

import numpy as np
import pytest

torch = pytest.importorskip("torch")

README = pathlib.Path(__file__).parent.parent.parent / "README.md"


def test_readme_training_block_runs():
    text = README.read_text(encoding="utf-8")
    section = text[text.index("## Training"):text.index("## Schedules")]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    scope = {}
    exec(compile(code, "README.md", "exec"), scope)
    grads, model, encoder = scope["grads"], scope["model"], scope["encoder"]
    assert sorted(grads) == sorted(model.weights)
    assert all(grads[k].shape == model.weights[k].shape for k in grads)
    assert all(p.grad is not None and float(p.grad.abs().max()) > 0 for p in encoder.parameters())
    # the module's next forward runs on the stepped weights: its output moved, and equals a fresh
    # compile of the new weights
    trees = scope["trees"][:25]
    with torch.no_grad():
        after = encoder(trees).numpy()
    assert not np.allclose(after, scope["out"])
    import cortex_tvm as ct
    fresh = ct.models.TreeLSTM(150, len(scope["vocab"]), embed_size=300).load_weights(encoder.state_dict())
    np.testing.assert_allclose(after, fresh.compile()(trees), rtol=1e-5, atol=1e-6)
