"""The README's @ct.recursive example (the issue's snippet) runs as written and equals
ct.models.TreeLSTM with the same weights; only the `...` weights and the trees are filled in."""
import pathlib
import re

import numpy as np

import cortex_tvm as ct

README = pathlib.Path(__file__).parent.parent.parent / "README.md"


def _decorator_block() -> str:
    text = README.read_text(encoding="utf-8")
    section = text[text.index("### Writing a model"):]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_readme_decorator_example_runs_and_equals_the_zoo_tree_lstm():
    code = _decorator_block()
    assert code.startswith("import cortex_tvm as ct\n\n@ct.recursive\ndef tree_lstm(node, p):")
    zoo = ct.models.TreeLSTM(hidden_size=16, vocab_size=40, seed=5)
    code, n = re.subn(r'weights=\{"emb": \.\.\., "W": \.\.\., "bW": \.\.\., "U": \.\.\., "bU": \.\.\.\}',
                      "weights=zoo_weights", code)
    assert n == 1, "the README example no longer passes its weights the way this test expects"
    if not _has_torch():
        code = code.replace("module = compiled.as_torch()", "module = None")
    trees = ct.data.random_trees(8, (1, 30), seed=6, vocab_size=40)
    scope = {"zoo_weights": zoo.weights, "trees": trees}
    exec(compile(code, "README.md", "exec"), scope)
    roots = scope["roots"]
    assert roots.shape == (8, 16) and roots.dtype == np.float32
    np.testing.assert_allclose(roots, zoo.compile()(trees), atol=1e-5, rtol=0)
    np.testing.assert_allclose(roots, zoo.reference(trees), atol=1e-5, rtol=0)
    if scope["module"] is not None:
        np.testing.assert_array_equal(scope["module"](trees).numpy(), roots)


def _has_torch() -> bool:
    import importlib.util
    return importlib.util.find_spec("torch") is not None
