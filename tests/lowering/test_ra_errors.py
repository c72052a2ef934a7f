"""ct.ra's errors: rec_compute's tree spec, shapes and states, Tree and node_input bounds, and RA
expressions used outside a compute."""
import pytest

from cortex_tvm import ra


def _leaf_and_state(shape=(4,)):
    w = ra.weight("w", shape)
    h = ra.rec_placeholder("h", shape)
    leaf = ra.compute(shape, lambda i: w[i], name="leaf")
    internal = ra.compute(shape, lambda i: w[i] + h[ra.child(ra.node(), 0), i], name="internal")
    return h, leaf, internal


def test_rec_compute_needs_tree_spec():
    h, leaf, internal = _leaf_and_state()
    for spec in (None, 2, "tree", {"max_children": 2}):
        with pytest.raises(TypeError, match="Tree"):
            ra.rec_compute(spec, {h: (leaf, internal)})


def test_rec_compute_shape_mismatch():
    h, leaf, internal = _leaf_and_state()
    w8 = ra.weight("w8", (8,))
    wrong = ra.compute((8,), lambda i: w8[i], name="wrong")
    with pytest.raises(ValueError, match="shape"):
        ra.rec_compute(ra.Tree(2), {h: (wrong, internal)})
    with pytest.raises(ValueError, match="shape"):
        ra.rec_compute(ra.Tree(2), {h: (leaf, wrong)})


def test_rec_compute_other_errors():
    h, leaf, internal = _leaf_and_state()
    with pytest.raises(ValueError, match="no recursive states"):
        ra.rec_compute(ra.Tree(2), {})
    with pytest.raises(TypeError, match="rec_placeholder"):
        ra.rec_compute(ra.Tree(2), {ra.weight("x", (4,)): (leaf, internal)})
    with pytest.raises(TypeError, match="ra.compute"):
        ra.rec_compute(ra.Tree(2), {h: (leaf, "internal")})
    program = ra.rec_compute(ra.Tree(2), {h: (leaf, internal)})
    assert program.states == [h] and program.spec.max_children == 2


@pytest.mark.parametrize("bad", [0, -1, 1.5, "2", None])
def test_tree_max_children_must_be_positive_int(bad):
    with pytest.raises(ValueError, match="max_children"):
        ra.Tree(max_children=bad)


def test_node_input_bound_must_be_positive():
    with pytest.raises(ValueError, match="bound"):
        ra.node_input("word", bound=0)


def test_ra_expressions_only_inside_computes():
    w = ra.weight("w", (4,))
    with pytest.raises(RuntimeError, match="ra.compute"):
        w[0]
    with pytest.raises(RuntimeError, match="ra.compute"):
        ra.child(ra.node(), 0)
