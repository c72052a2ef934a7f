"""Recipes: every shipped recipe on both zoo models, recipe files, knob fitting."""
import json

import pytest

import cortex_tvm as ct
from cortex_tvm import recipes

from .irutil import trace_names

H = 32
MODELS = ["TreeLSTM", "TreeFC"]


def recipe_cases():
    out = []
    for name in recipes.names():
        r = recipes.shipped()[name]
        if r.target not in ("*", "llvm"):
            continue        # device recipes: code generation is checked in tests/gpu
        for model in MODELS:
            out.append(pytest.param(name, model, id=f"{name}-{model}"))
    return out


@pytest.mark.parametrize("recipe, model", recipe_cases())
def test_every_shipped_recipe(check_numbers, fresh, recipe, model):
    r = recipes.shipped()[recipe]
    if r.model not in ("*", model):
        # a recipe written for another model says it does not fit
        with pytest.raises(ct.ScheduleError, match="does not fit this model"):
            r.fitted(lambda: fresh(model))
        return
    compiled = check_numbers(model, recipe)
    assert compiled.recipe_name == recipe


def test_names_and_defaults():
    names = recipes.names()
    assert {"none", "auto", "treelstm_llvm"} <= set(names)
    assert names == sorted(names)
    for model in MODELS:
        defaults = [r for r in recipes.shipped().values()
                    if r.default and r.model == model and r.target == "llvm"]
        assert len(defaults) <= 1


def test_recipe_file(tmp_path, check_numbers):
    path = tmp_path / "mine.json"
    steps = [{"primitive": "specialize_leaves"},
             {"primitive": "fast_math"},
             {"primitive": "pad_levels", "args": {"multiple": "$tile"}},
             {"primitive": "dense_index", "args": {"tensor": "child_sum"}},
             {"primitive": "vectorize_block", "args": {"block": "no_such_block"}, "optional": True},
             {"primitive": "vectorize_block", "args": {"block": "child_sum"}}]
    path.write_text(json.dumps({"name": "mine", "model": "TreeFC", "knobs": {"tile": [2, 4]}, "steps": steps}))
    r = recipes.load_file(str(path))
    assert r.name == "mine" and r.model == "TreeFC" and r.target == "*" and r.knob_values() == {"tile": 2}
    with pytest.warns(UserWarning, match="no block or scratchpad 'no_such_block'"):   # named, then skipped
        compiled = check_numbers("TreeFC", str(path))
    assert compiled.recipe_name == "mine"
    assert compiled.plan.node_tile == 2
    # a Recipe object works too, with a knob chosen
    with pytest.warns(UserWarning, match="no_such_block"):
        compiled = check_numbers("TreeFC", r.with_knobs(tile=4))
    assert compiled.plan.node_tile == 4
    with pytest.raises(ValueError, match="no knobs \\['nope'\\]"):
        r.with_knobs(nope=1)


@pytest.mark.parametrize("content", ["{not json", json.dumps({"steps": []}), json.dumps([1, 2]),
                                     json.dumps({"name": "x", "steps": 3})])
def test_corrupt_recipe_file(tmp_path, content, make_model):
    path = tmp_path / "broken.json"
    path.write_text(content)
    with pytest.raises(ValueError, match=str(path)):
        recipes.load_file(str(path))
    with pytest.raises(ValueError, match="broken.json"):
        make_model("TreeFC").compile(schedule=str(path))


def test_missing_recipe_file(tmp_path, make_model):
    path = tmp_path / "nowhere.json"
    with pytest.raises(ValueError, match="nowhere.json"):
        make_model("TreeFC").compile(schedule=str(path))


def test_fitting_picks_a_column_tile_that_divides(fresh):
    r = recipes.shipped()["treelstm_llvm"]
    fitted = r.fitted(lambda: fresh("TreeLSTM"))
    values = fitted.knob_values()
    tile = values["column_tile"]
    assert (5 * H) % tile == 0 and H % tile == 0 or (5 * H) % tile == 0
    assert tile in r.knobs["column_tile"]
    # the fitted recipe applies cleanly (no optional step needed for the main GEMM)
    rs = fitted.apply(fresh("TreeLSTM"))
    assert "tile_gemm" in trace_names(rs)
    assert [p[:3] for p in rs.plan.packs][0][:2] == ("U", 0)


def test_fitting_moves_past_a_tile_that_does_not_divide(fresh):
    r = recipes.Recipe("t", steps=({"primitive": "pack", "args": {"weight": "U", "axis": 0, "tile": "$c"}},),
                       knobs={"c": [64, 48, 80, 32]})
    fitted = r.fitted(lambda: fresh("TreeLSTM"))
    assert fitted.knob_values()["c"] == 80              # the first candidate dividing 5H = 160
    with pytest.raises(ct.ScheduleError, match="does not fit this model"):
        recipes.Recipe("u", steps=r.steps, knobs={"c": [64, 48]}).fitted(lambda: fresh("TreeLSTM"))


def test_callable_schedule_and_errors(make_model):
    model = make_model("TreeFC")
    compiled = model.compile(schedule=lambda rs: rs.specialize_leaves())
    assert compiled.recipe_name == "<lambda>" and compiled.lowered.specialized
    with pytest.raises(ValueError, match="unknown schedule 'nope'"):
        model.compile(schedule="nope")
    with pytest.raises(TypeError, match="schedule must be"):
        model.compile(schedule=3)
    with pytest.raises(ct.ScheduleError, match="no block named"):
        model.compile(schedule=lambda rs: rs.vectorize_block("nope"))


def test_optional_step_naming_a_block_the_program_never_had_warns(fresh):
    """An optional step may not apply (a block that hoist removed): silent.  One that names a
    block the program never had (a renamed compute) would vanish without a word: it warns."""
    import warnings
    steps = ({"primitive": "specialize_leaves"},
             {"primitive": "vectorize_block", "args": {"block": "internal_c", "lanes": 8}, "optional": True},
             {"primitive": "vectorize_block", "args": {"block": "cell_c", "lanes": 8}, "optional": True})
    with pytest.warns(UserWarning, match=r"optional step vectorize_block\('cell_c'\) skipped: the program has no "
                                         r"block or scratchpad 'cell_c'"):
        rs = ct.recipes.Recipe("renamed", steps).apply(fresh("TreeLSTM"))
    assert [s.primitive for s in rs.trace] == ["specialize_leaves", "vectorize_block"]
    hoisted = ({"primitive": "specialize_leaves"}, {"primitive": "hoist"},
               {"primitive": "vectorize_block", "args": {"block": "leaf_c", "lanes": 8}, "optional": True})
    with warnings.catch_warnings():
        warnings.simplefilter("error")               # leaf_c existed until hoist removed it: silent
        ct.recipes.Recipe("hoisted", hoisted).apply(fresh("TreeLSTM"))
