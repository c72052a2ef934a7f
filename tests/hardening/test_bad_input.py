"""Bad-input catalogue: every kind of bad input raises ValueError/TypeError (or a subclass such
as ScheduleError) naming the problem, and never crashes or hangs the process."""
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import cortex_tvm as ct
from cortex_tvm.data import Node
from cortex_tvm.schedule import RecSchedule

H, V = 16, 40


@pytest.fixture(scope="module")
def model():
    return ct.models.TreeLSTM(hidden_size=H, vocab_size=V)


@pytest.fixture(scope="module")
def compiled(model):
    return model.compile(schedule="none")


def _cycle():
    inner = Node(children=[Node(word=1), Node(word=2)])
    root = Node(children=[inner, Node(word=3)])
    inner.children[0] = root
    return root


def _dag_cycle():
    a = Node(word=1)
    b = Node(children=[Node(word=2), a])
    a.children = [Node(word=3), b]
    return b


def _write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def _plain(model):
    """A schedule of the model's plain program (leaves not specialized)."""
    return RecSchedule(model.lower(specialize_leaves=False))


# (id, callable(model, compiled, tmp_path), exception, match)
CASES = [
    # structures
    ("cycle", lambda m, c, t: c([_cycle()]), ValueError, "cycle"),
    ("shared subtree", lambda m, c, t: c([Node(children=[Node(word=1)] * 2)]), ValueError, "shared"),
    ("three children", lambda m, c, t: c([Node(children=[Node(word=i) for i in range(3)])]), ValueError,
     "max_children=2"),
    ("empty batch", lambda m, c, t: c([]), ValueError, "empty"),
    ("not a node", lambda m, c, t: c([Node(word=1), 3]), TypeError, "Node"),
    ("batch not a list", lambda m, c, t: c(iter([Node(word=1)])), TypeError, "list or tuple"),
    ("empty children", lambda m, c, t: Node(children=[]), ValueError, "empty"),
    ("dag cycle", lambda m, c, t: ct.models.DAGRNN(hidden_size=4, vocab_size=V).linearize([_dag_cycle()]),
     ValueError, "cycle"),
    # word ids
    ("negative word", lambda m, c, t: c([Node(word=-1)]), ValueError, "vocabulary"),
    ("word == vocab", lambda m, c, t: c([Node(children=[Node(word=1), Node(word=V)])]), ValueError,
     f"vocab_size={V}"),
    ("float word", lambda m, c, t: Node(word=1.5), TypeError, "word"),
    # weights
    ("weight shape", lambda m, c, t: m.load_weights({**m.weights, "W": np.zeros((3, 3), np.float32)}),
     ValueError, "shape"),
    ("weight dtype", lambda m, c, t: m.load_weights({**m.weights, "U": m.weights["U"].astype(np.float64)}),
     TypeError, "dtype"),
    ("weight nan", lambda m, c, t: m.load_weights({**m.weights, "bU": np.full(5 * H, np.nan, np.float32)}),
     ValueError, "NaN"),
    ("weight missing", lambda m, c, t: m.load_weights({"emb": m.weights["emb"]}), ValueError, "missing"),
    # targets
    ("unknown target", lambda m, c, t: m.compile(target="tpu"), ValueError, "unknown target 'tpu'"),
    ("target type", lambda m, c, t: m.compile(target=42), TypeError, "target must be"),
    # schedules and knobs
    ("unknown recipe", lambda m, c, t: m.compile(schedule="fastest"), ValueError, "unknown schedule 'fastest'"),
    ("schedule type", lambda m, c, t: m.compile(schedule=3.5), TypeError, "schedule must be"),
    ("unknown knob", lambda m, c, t: ct.recipes.shipped()["treelstm_llvm"].with_knobs(speed=1), ValueError,
     "no knobs"),
    ("knob value type", lambda m, c, t: ct.recipes.shipped()["treelstm_llvm"].with_knobs(column_tile="wide"),
     ValueError, "column_tile"),
    ("bounds_check type", lambda m, c, t: m.compile(bounds_check="yes"), TypeError, "bounds_check"),
    ("pack tile 7", lambda m, c, t: _plain(m).pack("U", tile=7), ct.ScheduleError,
     "does not divide"),
    ("tile_gemm unknown block", lambda m, c, t: _plain(m).tile_gemm("nope"), ct.ScheduleError,
     "no block named 'nope'"),
    ("pad_levels 0", lambda m, c, t: _plain(m).pad_levels(0), ct.ScheduleError, "positive int"),
    ("replay bad args", lambda m, c, t: _plain(m).replay([{"primitive": "pad_levels", "args": {"multipl": 2}}]),
     ct.ScheduleError, "pad_levels"),
    ("replay bad json", lambda m, c, t: _plain(m).replay("[{"), ct.ScheduleError, "JSON"),
    # recipe files
    ("recipe corrupt json", lambda m, c, t: m.compile(schedule=_write(t, "r.json", '{"name": ')), ValueError,
     "r.json"),
    ("recipe not an object", lambda m, c, t: m.compile(schedule=_write(t, "r.json", "[1, 2]")), ValueError,
     "JSON object"),
    ("recipe without steps", lambda m, c, t: m.compile(schedule=_write(t, "r.json", '{"name": "x"}')),
     ValueError, "steps"),
    ("recipe steps not a list", lambda m, c, t: m.compile(
        schedule=_write(t, "r.json", '{"name": "x", "steps": "pack"}')), ValueError, "steps"),
    ("recipe unknown primitive", lambda m, c, t: m.compile(
        schedule=_write(t, "r.json", json.dumps({"name": "x", "steps": [{"primitive": "explode"}]}))),
     ct.ScheduleError, "unknown primitive 'explode'"),
    ("recipe missing file", lambda m, c, t: m.compile(schedule=str(t / "nope.json")), ValueError,
     "No such file"),
    # exported models
    ("load weights shape", lambda m, c, t: ct.load(c.export(t / "exp"), weights={
        **m.weights, "W": np.zeros((2, 2), np.float32)}), ValueError, "shape"),
    ("load weights extra", lambda m, c, t: ct.load(c.export(t / "exp"), weights={
        **m.weights, "V": np.zeros(2, np.float32)}), ValueError, "unexpected"),
    ("load corrupt meta", lambda m, c, t: (c.export(t / "exp"), (t / "exp" / "meta.json").write_text("{"),
                                           ct.load(t / "exp")), ValueError, "corrupt"),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_bad_input_raises_clear_error(case, model, compiled, tmp_path):
    _, call, exc, match = case
    before = {k: v.copy() for k, v in model.weights.items()}
    with pytest.raises(exc, match=match):
        call(model, compiled, tmp_path)
    for k, v in before.items():                 # a failed call changes nothing
        np.testing.assert_array_equal(model.weights[k], v)


def test_model_works_after_all_bad_input(model, compiled):
    trees = ct.data.random_trees(5, (1, 9), seed=1, vocab_size=V)
    np.testing.assert_allclose(compiled(trees), model.reference(trees), atol=1e-4)


def test_tuning_log_corrupt_line_warns_and_missing_file_raises(model, tmp_path):
    pytest.importorskip("cortex_tvm.tune")
    fc = ct.models.TreeFC(hidden_size=H, vocab_size=V)
    log = _write(tmp_path, "t.jsonl", '{"corrupt\n\n')
    with pytest.warns(UserWarning, match="line 1: skipped a corrupt record"):
        compiled = fc.compile(tuning_log=log)
    assert compiled.recipe_name == "derived"            # fell back to the default (derived) schedule
    with pytest.raises(ValueError, match="no knobs"):   # a knob-less recipe cannot be tuned
        fc.compile(schedule="none", tuning_log=log)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        model.compile(tuning_log=str(tmp_path / "missing.jsonl"))


def test_riskiest_cases_in_a_subprocess(tmp_path):
    """A cycle, a DAG cycle and a corrupt recipe in a fresh process: clean errors, exit 0, no hang."""
    bad = tmp_path / "bad.json"
    bad.write_text('{"name": "x", "steps": [{"primitive": "pack", "args": {"weight": "W", "tile": 7}}]}')
    script = textwrap.dedent(f"""
        import cortex_tvm as ct
        from cortex_tvm.data import Node
        m = ct.models.TreeFC(hidden_size=8, vocab_size=10)
        c = m.compile(schedule="none")
        inner = Node(children=[Node(word=1), Node(word=2)])
        root = Node(children=[inner, Node(word=3)])
        inner.children[0] = root
        for call in (lambda: c([root]), lambda: ct.models.DAGRNN(hidden_size=4, vocab_size=10).linearize([root]),
                     lambda: m.compile(schedule={str(bad)!r})):
            try:
                call()
                raise SystemExit("no error")
            except ValueError as err:
                print("ok:", type(err).__name__, err)
    """)
    env = {**os.environ, "TVM_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = [line for line in proc.stdout.splitlines() if line.startswith("ok:")]
    assert len(lines) == 3 and "cycle" in lines[0] and "cycle" in lines[1] and "does not divide" in lines[2]
