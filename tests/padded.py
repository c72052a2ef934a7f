"""The derived schedule with its levels padded to the node tile (`level_tails=False`): what
the tests of the padding invariant (every level a multiple of the node tile) compile, now that
the default ends each level in a tail instead."""
from cortex_tvm import recipes
from cortex_tvm.policy.padding import padded_model
from cortex_tvm.target import make_target


def compile_padded(model, **kwargs):
    target = make_target("llvm")
    recipe = recipes.resolve(padded_model(model, target), target, None).with_knobs(level_tails=False)
    compiled = model.compile(target=target, schedule=recipe, **kwargs)
    assert compiled.plan.node_tile > 1, compiled.plan
    return compiled
