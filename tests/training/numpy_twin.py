"""What the compiled-backward tests share: a seeded adjoint on every state of every node, the
numpy backward's gradients on it (the twin every compiled pass is held to), and the comparison."""
import numpy as np

import cortex_tvm as ct
from cortex_tvm.adjoint import Adjoint
from cortex_tvm.bench.cases import OPTIONS, structures
from cortex_tvm.target import make_target


def zoo_case(name: str, hidden: int, sst, count: int, seed: int):
    """A zoo model on its structures of the first `count` SST trees, one node per slot: (model,
    layout, the numpy forward's states, `random_adjoints`, an `Adjoint` compiled for this CPU)."""
    trees, vocab = sst
    model = ct.models.BY_NAME[name](hidden_size=hidden, vocab_size=len(vocab), **OPTIONS.get(name, {}))
    lin = model.linearize(structures(name, trees[:count]))
    states = model.numpy_forward(lin)
    compiled = Adjoint(model.program, model.linearize, make_target("llvm"))
    assert compiled.level_pass is not None, compiled.level_pass_note
    return model, lin, states, random_adjoints(states, seed), compiled


def random_adjoints(states, seed: int) -> list:
    """A float32 adjoint on every state row, but the null node's (slot 0: nothing reads it)."""
    rng = np.random.default_rng(seed)
    d_states = [rng.standard_normal(s.shape).astype(np.float32) for s in states]
    for d in d_states:
        d[0] = 0
    return d_states


def numpy_gradients(model, lin, states, d_states) -> dict:
    """The numpy backward's gradients (`Adjoint` without a target) on the layout `lin`."""
    return Adjoint(model.program, model.linearize).vjp(lin, states, model.weights, [d.copy() for d in d_states])


def assert_kept_states(kept, states, lin) -> None:
    """The training forward's states equal the numpy forward's at every node."""
    for mine, theirs in zip(kept, states):
        np.testing.assert_allclose(mine[lin.node_slots], theirs[lin.node_slots], rtol=0, atol=1e-5)


def assert_same_gradients(got: dict, want: dict, what: str = "") -> None:
    """The same weights (and features), each within 2e-5 of the largest entry of its gradient."""
    assert sorted(got) == sorted(want)
    for weight in want:
        scale = float(np.abs(want[weight]).max())
        assert scale > 0, weight                       # the comparison can fail
        np.testing.assert_allclose(got[weight], want[weight], rtol=0, atol=2e-5 * scale,
                                   err_msg=f"{weight} {what}")


def assert_forward_then_both_pullbacks(compiled, lin, weights, states, d_states, want) -> None:
    """The compiled training forward keeps the numpy forward's `states`, then both pullbacks,
    on its kept values ("backward") and recomputing from `states` ("all"), give `want`."""
    kept, token = compiled.forward(lin, weights)
    assert_kept_states(kept, states, lin)
    for part, values, forwarded in (("backward", kept, token), ("all", states, None)):
        got = compiled.vjp(lin, values, weights, [d.copy() for d in d_states], forwarded=forwarded)
        assert compiled.level_pass.last_run[0] == part
        assert_same_gradients(got, want, part)
