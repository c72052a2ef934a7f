"""The README's usage example runs as written (only the file path and the `...` weights are filled in)."""
import pathlib
import re

import numpy as np

README = pathlib.Path(__file__).parent.parent / "README.md"


def usage_block() -> str:
    text = README.read_text(encoding="utf-8")
    section = text[text.index("## Use"):]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_readme_usage_example_runs(tmp_path):
    import cortex_tvm as ct
    sst = (pathlib.Path(ct.data.__file__).parent / "sst_dev.txt").read_text(encoding="utf-8").splitlines()
    path = tmp_path / "trees.txt"
    path.write_text("\n".join(sst[:12]) + "\n", encoding="utf-8")
    code = usage_block().replace('"path/to/trees.txt"', repr(str(path)))
    code, n = re.subn(r"model\.load_weights\(\{.*?\}\)", "model.load_weights(dict(model.weights))", code)
    assert n == 1, "the README example no longer loads weights the way this test expects"
    scope = {}
    exec(compile(code, "README.md", "exec"), scope)
    trees, roots, every = scope["trees"], scope["roots"], scope["every"]
    assert roots.shape == (12, 256) and roots.dtype == np.float32
    np.testing.assert_allclose(roots, scope["model"].reference(trees), atol=1e-4)
    assert [len(e) for e in every] == [len(ct.data.postorder(t)) for t in trees]
    assert scope["tree"].children[0] is scope["leaf"]


def test_readme_dependency_example_runs(tmp_path):
    """The second block of the Use section (CoNLL-U, a word on an inner node) as written."""
    import cortex_tvm as ct
    text = README.read_text(encoding="utf-8")
    section = text[text.index("## Use"):text.index("### Models")]
    code = re.findall(r"```python\n(.*?)```", section, re.S)[1]
    sample = (pathlib.Path(ct.data.__file__).parent / "ud_sample.conllu")
    assert '"path/to/treebank.conllu"' in code
    code = "import cortex_tvm as ct\n" + code.replace('"path/to/treebank.conllu"', repr(str(sample)))
    scope = {}
    exec(compile(code, "README.md", "exec"), scope)
    trees, roots, model = scope["trees"] + [scope["dep"]], scope["roots"], scope["model"]
    assert roots.shape == (13, 150) and scope["dep"].word == 1 and scope["dep"].children
    np.testing.assert_allclose(roots, model.reference(trees), atol=1e-4)


def test_readme_ra_program_compiles(tmp_path):
    """The hand-written TreeFC RA block of "Writing a model", as written (V, H, the trees and
    the weight arrays filled in), compiles with ct.compile and computes TreeFC."""
    import cortex_tvm as ct
    text = README.read_text(encoding="utf-8")
    section = text[text.index("For full control, write the RA program yourself"):]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    assert "ct.compile(program" in code
    trees, vocab = ct.data.sst_sample()
    V, H = len(vocab), 16
    rng = np.random.default_rng(0)
    arrays = {"emb_array": rng.standard_normal((V, H)).astype(np.float32),
              "W_array": (rng.standard_normal((H, H)) / 4).astype(np.float32),
              "b_array": rng.standard_normal(H).astype(np.float32)}
    scope = {"ct": ct, "V": V, "H": H, "trees": trees[:10], **arrays}
    exec(compile(code, "README.md", "exec"), scope)
    from cortex_tvm import ra
    assert isinstance(scope["program"], ra.RecProgram)
    fc = ct.models.TreeFC(hidden_size=H, vocab_size=V)
    fc.load_weights({"emb": arrays["emb_array"], "W": arrays["W_array"], "b": arrays["b_array"]})
    want = ct.models.reference64(fc, trees[:10])
    np.testing.assert_allclose(scope["roots"], want, atol=1e-5)
