"""`cortex-tvm show` and `tune` on a user's model, named MODULE:NAME; their one-line errors."""
import json
import textwrap

import numpy as np
import pytest

import cortex_tvm as ct
from cortex_tvm import cli

USER_MODULE = textwrap.dedent('''
    import numpy as np
    import cortex_tvm as ct

    @ct.recursive
    def tree_fc(node, p):
        if node.is_leaf:
            return p.emb[node.word]
        return ct.tanh(p.W @ (tree_fc(node.children[0], p) + tree_fc(node.children[1], p)) + p.b)

    def weights(vocab=6000, hidden=8):
        rng = np.random.default_rng(7)
        return {"emb": rng.standard_normal((vocab, hidden)).astype(np.float32),
                "W": (rng.standard_normal((hidden, hidden)) / 4).astype(np.float32),
                "b": rng.standard_normal(hidden).astype(np.float32)}

    model = ct.frontend.TracedModel(tree_fc, weights(), max_children=2)

    def make():
        return ct.models.TreeFC(hidden_size=8, vocab_size=6000)

    not_a_model = 42
''')


@pytest.fixture
def user_file(tmp_path):
    path = tmp_path / "my_models.py"
    path.write_text(USER_MODULE, encoding="utf-8")
    return path


def test_show_prints_a_traced_cell_from_a_file(user_file, capsys):
    assert cli.main(["show", f"{user_file}:model"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("# TracedModel H=8 ")
    assert "# ---- lowered program (before any primitive)" in out and "level_offsets" in out
    assert "# ---- tile_gemm(" in out or "# ---- pack(" in out          # the derived schedule's steps


def test_tune_of_a_factory_writes_records_the_model_compiles_with(user_file, tmp_path, capsys):
    log = tmp_path / "user.jsonl"
    assert cli.main(["tune", f"{user_file}:make", "--trials", "2", "--log", str(log), "--repeats", "1"]) == 0
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(records) >= 2 and all(r["workload"]["model"] == "TreeFC" and r["workload"]["hidden"] == 8
                                     for r in records)
    assert any(r["error"] is None for r in records)
    out = capsys.readouterr().out
    assert f"use it: model.compile(tuning_log={str(log)!r})" in out
    model = ct.models.TreeFC(hidden_size=8, vocab_size=6000)
    trees, _ = ct.data.sst_sample()
    compiled = model.compile(tuning_log=str(log))
    np.testing.assert_allclose(compiled(trees[:10]), model.reference(trees[:10]), atol=1e-4)


def test_a_dotted_module_name_works_too(user_file, monkeypatch):
    monkeypatch.syspath_prepend(str(user_file.parent))
    model = cli.user_model("my_models:model")
    assert isinstance(model, ct.frontend.TracedModel) and model.hidden_size == 8


@pytest.mark.parametrize("argv, message", [
    (["show", "no_such_module_xyz:model"], "show: no_such_module_xyz:model: cannot import no_such_module_xyz: "
                                           "ModuleNotFoundError"),
    (["show", "/nowhere/models.py:model"], "show: /nowhere/models.py:model: no file /nowhere/models.py"),
    (["show", "{file}:missing"], "show: {file}:missing: {file} has no 'missing'"),
    (["show", "{file}:not_a_model"], "show: {file}:not_a_model: not_a_model is a int, not a model"),
    (["show", "{file}:model", "--hidden", "16"], "show: --hidden applies to zoo models; {file}:model has its own sizes"),
    (["tune", "{file}:make", "--vocab", "10"], "tune: --vocab applies to zoo models; {file}:make has its own sizes"),
    (["tune", "treefc", "--vocab", "0"], "tune: --vocab must be at least 1, got 0"),
    (["show", ":model"], "show: ':model': expected MODULE:NAME"),
])
def test_bad_model_names_are_one_line_errors(user_file, capsys, argv, message):
    argv = [a.replace("{file}", str(user_file)) for a in argv]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(message.replace("{file}", str(user_file))) and err.count("\n") == 1, err


def test_tune_takes_a_vocabulary_size_for_zoo_models(tmp_path):
    """--vocab sizes the zoo model; SST words past it are left out of the timed batches."""
    log = tmp_path / "v.jsonl"
    assert cli.main(["tune", "treefc", "--hidden", "8", "--vocab", "3000", "--trials", "1", "--log", str(log),
                     "--repeats", "1"]) == 0
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert records and all(r["workload"]["vocab"] == 3000 for r in records), records[0]["workload"]
