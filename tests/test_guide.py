"""docs/guide.md's python blocks run, in order, as one script (every other docs/*.md's too, a script
per file); docs/api.md is what the generator prints now."""
import pathlib
import re

GUIDE = pathlib.Path(__file__).parent.parent / "docs" / "guide.md"
API = pathlib.Path(__file__).parent.parent / "docs" / "api.md"


def test_every_python_block_of_the_guide_runs(tmp_path, monkeypatch):
    blocks = re.findall(r"```python\n(.*?)```", GUIDE.read_text(encoding="utf-8"), re.S)
    assert len(blocks) >= 7, "the guide lost its examples"
    monkeypatch.chdir(tmp_path)
    scope = {"__name__": "guide"}
    for i, block in enumerate(blocks):
        exec(compile(block, f"docs/guide.md, python block {i + 1}", "exec"), scope)
    # the blocks check themselves against references; these hold what the last ones made
    assert scope["served"].recipe_name == scope["compiled"].recipe_name
    assert scope["message"] and scope["best"] is not None


def test_every_python_block_of_the_other_docs_runs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    ran = []
    for doc in sorted(GUIDE.parent.glob("*.md")):
        if doc == GUIDE:
            continue
        blocks = re.findall(r"```python\n(.*?)```", doc.read_text(encoding="utf-8"), re.S)
        scope = {"__name__": doc.stem}
        for i, block in enumerate(blocks):
            exec(compile(block, f"docs/{doc.name}, python block {i + 1}", "exec"), scope)
        ran += [doc.name] * len(blocks)
    assert "training.md" in ran


def test_the_api_reference_is_current_and_names_the_public_api():
    from cortex_tvm import apidoc
    text = API.read_text(encoding="utf-8")
    assert text == apidoc.render(), "docs/api.md is stale: python -m cortex_tvm.apidoc > docs/api.md"
    for name in ("RecSchedule.level_tails", "RecSchedule.unroll_recursion", "ct.models.TreeLSTM", "ct.compile(",
                 "CompiledModel.export", "tune.tune(", "ct.data.load_conllu"):
        assert name in text, name
