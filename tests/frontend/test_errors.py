"""Everything a cell cannot trace raises TypeError/ValueError naming the line in the user's function.

Each bad cell marks its offending line with `# <-`; the test finds that line's
number in the source and expects it, and the cell's name, in the message.
"""
import inspect
import math

import numpy as np
import pytest

import cortex_tvm as ct

H, V = 8, 20


def _weights(**shapes):
    rng = np.random.default_rng(0)
    return {k: rng.standard_normal(s).astype(np.float32) for k, s in shapes.items()}


W = _weights(emb=(V, H), W=(H, 2 * H), b=(H,))


def _line(cell) -> int:
    lines, start = inspect.getsourcelines(cell.fn)
    return start + next(i for i, text in enumerate(lines) if "# <-" in text)


def _raises(error, cell, match, weights=W, max_children=2):
    with pytest.raises(error, match=match) as info:
        ct.compile(cell, weights=weights, max_children=max_children)
    message = str(info.value)
    assert f"{cell.__name__}, line {_line(cell)} of test_errors.py" in message, message
    return message


# ----------------------------------------------------------------------------- control flow
@ct.recursive
def branch_on_value(node, p):
    if node.is_leaf:
        return p.emb[node.word]
    h = ct.tanh(p.W @ ct.concat([branch_on_value(c, p) for c in node.children]) + p.b)
    if h:  # <-
        return h
    return -h


@ct.recursive
def calls_another_cell(node, p):
    if node.is_leaf:
        return p.emb[node.word]
    return branch_on_value(node.children[0], p)  # <-


def test_python_if_on_a_tensor():
    _raises(TypeError, branch_on_value, "control flow.*on a tensor value")


def test_calling_another_recursive_cell():
    _raises(TypeError, calls_another_cell, "branch_on_value.* called inside calls_another_cell: a traced cell "
            "may only call itself")


@ct.recursive
def compare_own_values(node, p):
    if node.is_leaf:
        return p.emb[node.word]
    hl, hr = compare_own_values(node.children[0], p), compare_own_values(node.children[1], p)
    return hl if hl > hr else hr  # <-


def test_comparing_own_tensors():
    _raises(TypeError, compare_own_values, "comparing tensors")


# ----------------------------------------------------------------------------- unknown operations
def _cell_with(op):
    @ct.recursive
    def cell(node, p):
        if node.is_leaf:
            return p.emb[node.word]
        x = cell(node.children[0], p) + cell(node.children[1], p)
        return op(x)  # <-
    return cell


@pytest.mark.parametrize("op, match", [
    (np.tanh, "numpy's tanh cannot be traced"),
    (lambda x: np.concatenate([x, x]), "numpy's concatenate cannot be traced"),
    (math.tanh, "has no value while tracing"),
    (lambda x: x ** 2, "unsupported operation"),
    (lambda x: x.sum(), "has no attribute 'sum'"),
    (lambda x: x[0], "not indexed while tracing"),
    (lambda x: ct.split(x, 3), r"ct.split\(x, 3\): x has 8 elements"),
    (lambda x: ct.tanh(2.0), "ct.tanh expects a tensor"),
    (lambda x: x @ x, "left side of @ must be a weight matrix"),
    (lambda x: ct.concat(x), "ct.concat expects a non-empty list"),
    (lambda x: x + ct.concat([x, x]), r"operands of \+ have shapes \(8,\) and \(16,\)"),
    (lambda x: tuple(x), "cannot be unpacked"),
    (lambda x: x * True, "operator \\*"),
], ids=["np.tanh", "np.concatenate", "math.tanh", "pow", "method", "index", "split", "scalar", "vec@vec",
        "concat-tensor", "shape", "unpack", "bool-scalar"])
def test_unknown_or_misused_operation(op, match):
    error = ValueError if match.startswith(("ct.split", "operands")) else TypeError
    message = _raises(error, _cell_with(op), match)
    if "lambda" in message:       # the error is in a helper: the cell's line that called it comes too
        assert "; called from cell, line" in message


@ct.recursive
def matrix_elementwise(node, p):
    if node.is_leaf:
        return p.emb[node.word] * p.W  # <-
    return matrix_elementwise(node.children[0], p)


def test_a_matrix_used_elementwise():
    _raises(TypeError, matrix_elementwise, r"p.W is a matrix \(8, 16\); use it as p.W @ x")


# ----------------------------------------------------------------------------- states
@ct.recursive
def shape_changes(node, p):
    if node.is_leaf:
        return p.emb[node.word]
    hl, hr = shape_changes(node.children[0], p), shape_changes(node.children[1], p)
    return ct.concat([hl, hr])  # <-


def test_state_shape_differs_between_leaf_and_inner_case():
    message = _raises(ValueError, shape_changes, r"state 0 has shape \(8,\) at a leaf .*but \(16,\) at an inner")
    assert f"line {_line(shape_changes) - 2} " in message          # the leaf's return line too


@ct.recursive
def arity_changes(node, p):
    if node.is_leaf:
        return p.emb[node.word]
    h = arity_changes(node.children[0], p)
    return h, h  # <-


def test_number_of_states_differs():
    _raises(ValueError, arity_changes, "the leaf case returns one tensor .* but the inner case a tuple of 2")


@ct.recursive
def returns_number(node, p):
    if node.is_leaf:
        return p.emb[node.word], 0.0  # <-
    return returns_number(node.children[0], p)


def test_a_state_that_is_not_a_tensor():
    _raises(TypeError, returns_number, "state 1 of the leaf case is a float")


# ----------------------------------------------------------------------------- weights
@ct.recursive
def missing_weight(node, p):
    if node.is_leaf:
        return p.emb[node.word]
    hl, hr = missing_weight(node.children[0], p), missing_weight(node.children[1], p)
    return ct.tanh(p.Wx @ ct.concat([hl, hr]) + p.b)  # <-


@ct.recursive
def rnn(node, p):
    if node.is_leaf:
        return p.emb[node.word]
    hl, hr = rnn(node.children[0], p), rnn(node.children[1], p)
    return ct.tanh(p.W @ ct.concat([hl, hr]) + p.b)  # <-


def test_missing_weight():
    _raises(ValueError, missing_weight, r"p.Wx: no weight 'Wx' in weights= \(given: \['W', 'b', 'emb'\]\)")


def test_wrongly_shaped_matrix():
    _raises(ValueError, rnn, r"p.W has shape \(8, 8\), so x needs 8 elements, but it has 16",
            weights={**W, "W": W["W"][:, :H]})


def test_wrongly_shaped_bias():
    _raises(ValueError, rnn, r"operands of \+ have shapes \(8,\) and \(9,\)",
            weights={**W, "b": np.zeros(H + 1, np.float32)})


def test_weights_that_are_not_float32_arrays():
    with pytest.raises(TypeError, match="dtype float64"):
        ct.compile(rnn, weights={**W, "b": np.zeros(H)})
    with pytest.raises(TypeError, match="expected a numpy array or torch tensor"):
        ct.compile(rnn, weights={**W, "b": [0.0] * H})
    with pytest.raises(TypeError, match="dict of name -> array"):
        ct.compile(rnn, weights=[W])
    with pytest.raises(ValueError, match=r"'b' has shape \(2, 2, 2\); a weight is a vector"):
        ct.compile(rnn, weights={**W, "b": np.zeros((2, 2, 2), np.float32)})
    with pytest.raises(ValueError, match="not a name the function can read"):
        ct.compile(rnn, weights={**W, "W.weight": W["W"]})


# ----------------------------------------------------------------------------- the node
@ct.recursive
def third_child(node, p):
    if node.is_leaf:
        return p.emb[node.word]
    return third_child(node.children[2], p)  # <-


@ct.recursive
def child_of_leaf(node, p):
    h = child_of_leaf(node.children[0], p)  # <-
    return h


@ct.recursive
def counts_children(node, p):
    if node.is_leaf:
        return p.emb[node.word]
    return sum(counts_children(c, p) for c in node.children) / len(node.children)  # <-


@ct.recursive
def peeks_at_child(node, p):
    if node.is_leaf:
        return p.emb[node.word]
    if node.children[0].is_leaf:  # <-
        return p.b
    return p.b


@ct.recursive
def calls_on_itself(node, p):
    if node.is_leaf:
        return p.emb[node.word]
    return calls_on_itself(node, p)  # <-


@ct.recursive
def word_arithmetic(node, p):
    if node.is_leaf:
        return p.emb[node.word + 1]  # <-
    return word_arithmetic(node.children[0], p)


@ct.recursive
def unknown_attribute(node, p):
    if node.is_leaf:
        return p.emb[node.label]  # <-
    return unknown_attribute(node.children[0], p)


@pytest.mark.parametrize("cell, error, match", [
    (third_child, ValueError, r"node.children\[2\]: max_children=2"),
    (child_of_leaf, ValueError, r"node.children\[0\] at a leaf"),
    (counts_children, TypeError, r"len\(node.children\) depends on the tree"),
    (peeks_at_child, TypeError, r"node.children\[0\].is_leaf: a cell inspects only its own node"),
    (calls_on_itself, TypeError, r"must be called on node.children\[j\]"),
    (word_arithmetic, TypeError, "node.word can only index an embedding table"),
    (unknown_attribute, TypeError, "node.label cannot be traced"),
], ids=lambda v: getattr(v, "__name__", None))
def test_node_misuse(cell, error, match):
    _raises(error, cell, match)


def test_a_recursive_cell_is_not_called_directly():
    with pytest.raises(TypeError, match=r"compile it with ct.compile\(rnn"):
        rnn(ct.data.Node(word=1), W)


def test_decorating_something_that_is_not_a_function():
    with pytest.raises(TypeError, match="decorates a function"):
        ct.recursive(3)
    with pytest.raises(TypeError, match="decorated with @ct.recursive"):
        ct.compile(lambda node, p: p.emb[node.word], weights=W)
