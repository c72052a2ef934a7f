"""The lowered PrimFunc's shape, RA's error cases, and models written from scratch with ct.ra."""
import numpy as np
import pytest
import tvm
import tvm_ffi

import cortex_tvm as ct
from cortex_tvm import ra
from cortex_tvm.data import Node, postorder, random_trees

import reference as ref

H, V = 32, 50
TOL = 1e-4

LSTM_PARAMS = ['word', 'children', 'level_offsets', 'roots', 'max_level_size',
               'emb', 'W', 'bW', 'U', 'bU', 'h', 'c', 'out']
FC_PARAMS = ['word', 'children', 'level_offsets', 'roots', 'max_level_size', 'emb', 'W', 'b', 'h', 'out']
# without leaf specialization every node tests num_children, so it is a parameter (after children)
LSTM_PLAIN_PARAMS = LSTM_PARAMS[:2] + ['num_children'] + LSTM_PARAMS[2:]
FC_PLAIN_PARAMS = FC_PARAMS[:2] + ['num_children'] + FC_PARAMS[2:]


@pytest.fixture(scope="module")
def lstm_model():
    return ct.models.TreeLSTM(hidden_size=H, vocab_size=V)


@pytest.fixture(scope="module")
def fc_model():
    return ct.models.TreeFC(hidden_size=H, vocab_size=V)


@pytest.fixture(scope="module")
def lstm_lowered(lstm_model):
    """Leaf-specialized: a "leaves" block, then the level loop over internal levels."""
    return lstm_model.lower(specialize_leaves=True)


@pytest.fixture(scope="module")
def fc_lowered(fc_model):
    return fc_model.lower(specialize_leaves=True)


@pytest.fixture(scope="module")
def lstm_plain(lstm_model):
    """Not specialized: one level loop over every level, leaves included."""
    return lstm_model.lower(specialize_leaves=False)


@pytest.fixture(scope="module")
def fc_plain(fc_model):
    return fc_model.lower(specialize_leaves=False)


# ---------------------------------------------------------------- IR walking helpers

def blocks(stmt):
    found = []
    tvm_ffi.structural_walk(stmt, (tvm.s_tir.stmt.SBlock, found.append), order="pre")
    return found


def block_names(stmt):
    return [b.name_hint for b in blocks(stmt)]


def find_block(stmt, name):
    matches = [b for b in blocks(stmt) if b.name_hint == name]
    assert len(matches) == 1, (name, block_names(stmt))
    return matches[0]


def fors(stmt):
    found = []
    tvm_ffi.structural_walk(stmt, (tvm.tirx.For, found.append), order="pre")
    return found


def loads_of(expr, buffer_name):
    found = []
    tvm_ffi.structural_walk(expr, (tvm.ir.TensorLoad, found.append), order="pre")
    return [ld for ld in found if ld.source.name == buffer_name]


def var_names(expr):
    found = []
    tvm_ffi.structural_walk(expr, (tvm.tirx.Var, found.append), order="pre")
    return {v.name for v in found}


def outer_for_of(func, block_name):
    """The For loop whose body contains the block `block_name` (innermost such loop)."""
    candidates = [f for f in fors(func.body) if block_name in block_names(f.body)]
    assert candidates, block_name
    return candidates[-1]


# ---------------------------------------------------------------- IR shape

@pytest.mark.parametrize("which", ["lstm", "fc"])
def test_stage_blocks_exist(which, lstm_lowered, fc_lowered):
    func = (lstm_lowered if which == "lstm" else fc_lowered).func
    assert isinstance(func, tvm.tirx.PrimFunc)
    names = block_names(func.body)
    for name in ("leaves", "level", "roots"):
        assert names.count(name) == 1, names
    assert names.index("leaves") < names.index("level") < names.index("roots")
    text = func.script()
    for name in ("leaves", "level", "roots"):
        assert f'T.sblock("{name}")' in text


def _level_binding(func):
    """(level loop, the expression its "level" block binds the level to)."""
    level_loop = outer_for_of(func, "level")
    realize = level_loop.body
    assert isinstance(realize, tvm.s_tir.stmt.SBlockRealize) and realize.block.name_hint == "level"
    (binding,) = realize.iter_values
    return level_loop, binding


def _num_levels_minus(extent):
    """k when `extent` is `num_levels_plus_1 - k`."""
    assert isinstance(extent, tvm.ir.prim.expr.Sub), extent
    assert isinstance(extent.a, tvm.tirx.Var) and extent.a.name == "num_levels_plus_1", extent
    return int(extent.b)


def test_level_loop_is_serial_over_levels(lstm_lowered):
    func = lstm_lowered.func
    level_loop, binding = _level_binding(func)
    assert level_loop.kind == tvm.tirx.ForKind.SERIAL
    # the loop counts from 0 (so s_tir can split it); its block computes level l + 1
    # (level 0 = leaves), and there are L - 1 internal levels
    assert int(level_loop.min) == 0
    assert _num_levels_minus(level_loop.extent) == 2
    assert isinstance(binding, tvm.ir.prim.expr.Add) and binding.a.same_as(level_loop.loop_var)
    assert int(binding.b) == 1
    assert lstm_lowered.first_level == 1 and lstm_lowered.specialized
    # the leaves block is not inside it, the level block is
    assert "leaves" not in block_names(level_loop.body)
    assert block_names(level_loop.body)[0] == "level"
    # the level index is opaque: levels must run in order
    level = find_block(func.body, "level")
    assert [iv.iter_type for iv in level.iter_vars] == [tvm.tirx.IterVar.Opaque]


@pytest.mark.parametrize("which", ["lstm", "fc"])
def test_plain_program_has_no_leaves_block(which, lstm_plain, fc_plain):
    lowered = lstm_plain if which == "lstm" else fc_plain
    func = lowered.func
    assert not lowered.specialized and lowered.first_level == 0
    names = block_names(func.body)
    assert "leaves" not in names
    assert names.count("level") == 1 and names.count("roots") == 1
    # the level loop covers every level, leaves included: it computes level l itself
    level_loop, binding = _level_binding(func)
    assert level_loop.kind == tvm.tirx.ForKind.SERIAL
    assert int(level_loop.min) == 0
    assert _num_levels_minus(level_loop.extent) == 1
    assert binding.same_as(level_loop.loop_var)
    # both cases are computed in the level; each state's new value is a select
    states = ["h", "c"] if which == "lstm" else ["h"]
    level = find_block(func.body, "level")
    inner = block_names(level.body)
    assert inner[-len(states):] == [f"{s}_select" for s in states]
    assert "leaf_h" in inner and "internal_h" in inner
    for state in states:
        select = find_block(level.body, f"{state}_select")
        store = select.body
        assert isinstance(store, tvm.tirx.BufferStore) and store.buffer.name == state
        call = store.value
        assert isinstance(call, tvm.ir.Call) and call.op.name.endswith("if_then_else"), call
        cond = call.args[0]
        # num_children[level_offsets[l] + j] == 0
        assert isinstance(cond, tvm.ir.prim.expr.EQ) and int(cond.b) == 0, cond
        assert isinstance(cond.a, tvm.ir.TensorLoad) and cond.a.source.name == "num_children"
        (index,) = cond.a.indices
        assert isinstance(index, tvm.ir.prim.expr.Add)
        assert isinstance(index.a, tvm.ir.TensorLoad) and index.a.source.name == "level_offsets"
        assert index.a.indices[0].same_as(level.iter_vars[0].var)
        assert loads_of(call.args[1], "leaf_" + state) and loads_of(call.args[2], "internal_" + state)
    assert lowered.uses_num_children
    assert lowered.params == (LSTM_PLAIN_PARAMS if which == "lstm" else FC_PLAIN_PARAMS)
    assert [p.name for p in func.params] == lowered.params


def test_lower_defaults_to_unspecialized():
    model = ct.models.TreeFC(hidden_size=16, vocab_size=V)
    lowered = model.lower()
    assert not lowered.specialized
    assert "leaves" not in block_names(lowered.func.body)
    # the two defaults differ on purpose (Model.lower: where a schedule starts; lower.lower: leaves apart)
    assert ct.lower.lower(model.program).specialized


def test_node_loops_read_level_offsets(lstm_lowered):
    func = lstm_lowered.func
    level = find_block(func.body, "level")
    inner = [b for b in blocks(level.body) if b.name_hint != "level"]
    assert [b.name_hint for b in inner] == ["gates_sum", "gates", "internal_c", "internal_h"]
    node_loops = [f for f in fors(level.body) if loads_of(f.extent, "level_offsets")]
    # one data-dependent node loop per compute, extent level_offsets[l + 1] - level_offsets[l]
    assert len(node_loops) == len(inner)
    for loop in node_loops:
        assert len(loads_of(loop.extent, "level_offsets")) == 2
        assert loop.kind == tvm.tirx.ForKind.SERIAL
    # all other loops have constant extents
    for loop in fors(level.body):
        if loop not in node_loops:
            assert isinstance(loop.extent, tvm.tirx.IntImm)
    # the leaves' node loops read level_offsets[0] and [1]
    leaves = find_block(func.body, "leaves")
    leaf_loops = [f for f in fors(leaves.body) if loads_of(f.extent, "level_offsets")]
    assert len(leaf_loops) == 4
    for loop in leaf_loops:
        idx = sorted(int(ld.indices[0]) for ld in loads_of(loop.extent, "level_offsets"))
        assert idx == [0, 1]


def test_scratchpads_are_indexed_by_node_id(lstm_lowered):
    level = find_block(lstm_lowered.func.body, "level")
    assert {b.name for b in level.alloc_buffers} == {"gates_sum", "gates"}
    for buf in level.alloc_buffers:
        # one row per slot (node id), as in CORTEX's ILIR
        assert isinstance(buf.shape[0], tvm.tirx.Var) and buf.shape[0].name == "num_slots"
        assert int(np.prod([int(d) for d in buf.shape[1:]])) == 5 * H     # one node's gates
        # every access is buf[level_offsets[l] + j, r]
        accesses = loads_of(level.body, buf.name)
        stores = []
        tvm_ffi.structural_walk(level.body, (tvm.tirx.BufferStore, stores.append), order="pre")
        indices = [ld.indices[0] for ld in accesses] + [st.indices[0] for st in stores if st.buffer.name == buf.name]
        assert len(indices) >= 2
        for first in indices:
            assert isinstance(first, tvm.ir.prim.expr.Add), first
            assert isinstance(first.a, tvm.ir.TensorLoad) and first.a.source.name == "level_offsets"
    rs = ct.RecSchedule(lstm_lowered)
    assert sorted(rs.scratchpads()) == ["gates", "gates_sum", "leaf_gates", "leaf_gates_sum"]


def test_roots_block_gathers_first_state(lstm_lowered):
    roots = find_block(lstm_lowered.func.body, "roots")
    store = roots.body
    assert isinstance(store, tvm.tirx.BufferStore) and store.buffer.name == "out", type(store)
    assert loads_of(store.value, "h") and not loads_of(store.value, "c")
    assert loads_of(store.value, "roots")


def test_params_tree_lstm(lstm_lowered):
    assert lstm_lowered.params == LSTM_PARAMS
    assert len(lstm_lowered.func.params) == len(LSTM_PARAMS)
    assert not lstm_lowered.uses_num_children
    assert [w.name for w in lstm_lowered.weights] == ["emb", "W", "bW", "U", "bU"]


def test_params_tree_fc(fc_lowered):
    assert fc_lowered.params == FC_PARAMS
    assert len(fc_lowered.func.params) == len(FC_PARAMS)


@pytest.mark.parametrize("specialize, steps", [
    (True, ["build_stages[leaf]", "build_stages[internal]", "assemble"]),
    (False, ["build_stages[both]", "assemble"]),
])
def test_lower_is_cached_and_dump_sees_every_step(specialize, steps):
    model = ct.models.TreeFC(hidden_size=16, vocab_size=V)
    assert model.lower(specialize_leaves=specialize) is model.lower(specialize_leaves=specialize)
    assert model.lower(specialize_leaves=True) is not model.lower(specialize_leaves=False)
    seen = []
    lowered = model.lower(specialize_leaves=specialize, dump=lambda step, ir: seen.append((step, ir)))
    assert [s for s, _ in seen] == steps
    assert all(isinstance(ir, tvm.tirx.PrimFunc) for _, ir in seen)
    assert tvm_ffi.structural_equal(lowered.func, model.lower(specialize_leaves=specialize).func)


def test_rec_schedule_block_names(lstm_lowered, lstm_plain):
    rs = ct.RecSchedule(lstm_lowered)
    leaves = ["leaf_gates_sum", "leaf_gates", "leaf_c", "leaf_h"]
    level = ["gates_sum", "gates", "internal_c", "internal_h"]
    assert rs.block_names("leaves") == leaves
    assert rs.block_names("level") == level
    assert rs.block_names() == leaves + level
    assert rs.has_block("leaves") and rs.has_block("gates") and not rs.has_block("nope")
    with pytest.raises(ct.ScheduleError, match="no block named 'nope'"):
        rs.block_names("nope")
    # the unspecialized program: no leaves scope, everything inside "level"
    plain = ct.RecSchedule(lstm_plain)
    assert not plain.has_block("leaves")
    assert plain.block_names() == plain.block_names("level") == leaves + level + ["h_select", "c_select"]
    # forwarded primitives are recorded (queries are not)
    loops = rs.get_loops(rs.get_sblock("internal_h"))
    rs.split(loops[-1], [None, 8])
    assert [t.primitive for t in rs.trace] == ["s_tir.split"]
    assert "internal_h" in rs.show()
    # scheduling a copy leaves the lowered function alone
    assert len(fors(lstm_lowered.func.body)) < len(fors(rs.func.body))


def test_compile_errors():
    model = ct.models.TreeFC(hidden_size=16, vocab_size=V)
    with pytest.raises(ValueError, match="schedule"):
        model.compile(schedule="no-such-recipe")
    with pytest.raises(TypeError, match="schedule"):
        model.compile(schedule=3)
    with pytest.raises(ValueError, match="target"):
        model.compile(target="tpu")


def test_identical_models_compile_once():
    a = ct.models.TreeFC(hidden_size=16, vocab_size=V)
    b = ct.models.TreeFC(hidden_size=16, vocab_size=V, seed=5)
    a.compile()
    count = ct.compile_count()
    cb = b.compile()      # same IR, other weights: the build cache answers
    assert ct.compile_count() == count
    trees = random_trees(5, (1, 9), seed=0, vocab_size=V)
    np.testing.assert_allclose(cb(trees), ref.roots("TreeFC", trees, b.weights), atol=TOL, rtol=0)


# ---------------------------------------------------------------- RA errors

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


# ---------------------------------------------------------------- models from scratch

class TreeRNN(ct.models.Model):
    """Leaf h = emb[word]; internal h = tanh(Wl h_l + Wr h_r + b).

    `split=False`: one compute with two reductions; `split=True`: two
    reduction computes and an elementwise one.
    """

    def __init__(self, hidden_size, vocab_size, split=False, seed=0):
        self.hidden_size, self.vocab_size, self.split = hidden_size, vocab_size, split
        super().__init__(seed)

    def weight_shapes(self):
        H, V = self.hidden_size, self.vocab_size
        return {"emb": (V, H), "Wl": (H, H), "Wr": (H, H), "b": (H,)}

    def build_program(self):
        H, V = self.hidden_size, self.vocab_size
        tree, n = ra.Tree(max_children=2), ra.node()
        word = ra.node_input("word", bound=V)
        emb, Wl, Wr, b = (ra.weight("emb", (V, H)), ra.weight("Wl", (H, H)),
                          ra.weight("Wr", (H, H)), ra.weight("b", (H,)))
        h = ra.rec_placeholder("h", (H,))
        leaf_h = ra.compute((H,), lambda i: emb[word[n], i], name="leaf_h")
        kl, kr = ra.reduce_axis(H, "kl"), ra.reduce_axis(H, "kr")
        if self.split:
            left = ra.compute((H,), lambda i: ra.sum(Wl[i, kl] * h[ra.child(n, 0), kl], kl), name="left")
            right = ra.compute((H,), lambda i: ra.sum(Wr[i, kr] * h[ra.child(n, 1), kr], kr), name="right")
            internal_h = ra.compute((H,), lambda i: ra.tanh(left[i] + right[i] + b[i]), name="internal_h")
        else:
            internal_h = ra.compute(
                (H,), lambda i: ra.tanh(ra.sum(Wl[i, kl] * h[ra.child(n, 0), kl], kl)
                                        + ra.sum(Wr[i, kr] * h[ra.child(n, 1), kr], kr) + b[i]),
                name="internal_h")
        return ra.rec_compute(tree, {h: (leaf_h, internal_h)})


class TreeMean3(ct.models.Model):
    """A ternary model: leaf h = emb[word]; internal h = tanh(W mean(children h) + b).

    Reads the number of children (ra.num_children) and reduces over children and k at once.
    """

    def __init__(self, hidden_size, vocab_size, seed=0):
        self.hidden_size, self.vocab_size = hidden_size, vocab_size
        super().__init__(seed)

    def weight_shapes(self):
        H, V = self.hidden_size, self.vocab_size
        return {"emb": (V, H), "W": (H, H), "b": (H,)}

    def build_program(self):
        H, V = self.hidden_size, self.vocab_size
        tree, n = ra.Tree(max_children=3), ra.node()
        word = ra.node_input("word", bound=V)
        emb, W, b = ra.weight("emb", (V, H)), ra.weight("W", (H, H)), ra.weight("b", (H,))
        h = ra.rec_placeholder("h", (H,))
        leaf_h = ra.compute((H,), lambda i: emb[word[n], i], name="leaf_h")
        j, k = ra.reduce_axis(3, "j"), ra.reduce_axis(H, "k")
        internal_h = ra.compute(
            (H,), lambda i: ra.tanh(ra.sum(W[i, k] * h[ra.child(n, j), k], [j, k])
                                    / ra.num_children(n).astype("float32") + b[i]),
            name="internal_h")
        return ra.rec_compute(tree, {h: (leaf_h, internal_h)})


def mean3_reference(trees, w):
    w = {k: v.astype(np.float64) for k, v in w.items()}
    out = []
    for tree in trees:
        order = postorder(tree)
        index = {id(x): p for p, x in enumerate(order)}
        h = np.zeros((len(order), w["W"].shape[0]))
        for p, node in enumerate(order):
            if node.is_leaf:
                h[p] = w["emb"][node.word]
            else:
                mean = sum(h[index[id(ch)]] for ch in node.children) / len(node.children)
                h[p] = np.tanh(w["W"] @ mean + w["b"])
        out.append(h)
    return out


def rnn_trees():
    trees = random_trees(25, (1, 40), seed=11, vocab_size=V)
    trees.append(Node(children=[Node(children=[Node(word=1)]), Node(word=2)]))   # a unary node
    trees.append(ct.data.chain_tree(200, seed=3, vocab_size=V))
    return trees


@pytest.mark.parametrize("split", [False, True], ids=["two-sums", "two-computes"])
def test_tree_rnn_from_scratch(split):
    model = TreeRNN(H, V, split=split)
    lowered = model.lower(specialize_leaves=True)
    level_blocks = ct.RecSchedule(lowered).block_names("level")
    if split:
        assert level_blocks == ["left", "right", "internal_h"]
    else:   # each nested reduction becomes its own block
        assert level_blocks == ["internal_h_sum", "internal_h_sum1", "internal_h"]
    assert lowered.params == ['word', 'children', 'level_offsets', 'roots', 'max_level_size',
                              'emb', 'Wl', 'Wr', 'b', 'h', 'out']
    plain = model.lower(specialize_leaves=False)
    assert ct.RecSchedule(plain).block_names("level") == ["leaf_h"] + level_blocks + ["h_select"]
    assert plain.params == ['word', 'children', 'num_children', 'level_offsets', 'roots', 'max_level_size',
                            'emb', 'Wl', 'Wr', 'b', 'h', 'out']
    trees = rnn_trees()
    want = ref.tree_rnn(trees, model.weights)
    for schedule in ("none", None):
        compiled = model.compile(schedule=schedule)
        np.testing.assert_allclose(compiled(trees), np.stack([h[-1] for h in want]), atol=TOL, rtol=0)
        for got, w in zip(compiled(trees, all_nodes=True), want):
            np.testing.assert_allclose(got, w, atol=TOL, rtol=0)


def test_custom_schedule_callable():
    model = TreeRNN(H, V, split=True)
    calls = []

    def my_schedule(rs):
        assert isinstance(rs, ct.RecSchedule)
        assert not rs.lowered.specialized          # recipes start from the plain program
        rs.specialize_leaves()
        for name in rs.block_names("level"):
            loops = rs.get_loops(rs.get_sblock(name))
            _, inner = rs.split(loops[-1] if name == "internal_h" else loops[-2], [None, 8])
        calls.append(list(rs.trace))
        return rs

    compiled = model.compile(schedule=my_schedule)
    assert compiled.recipe_name == "my_schedule"
    assert len(calls) == 1
    assert [t.primitive for t in calls[0]] == ["specialize_leaves"] + ["s_tir.split"] * 3
    trees = rnn_trees()
    want = np.stack([h[-1] for h in ref.tree_rnn(trees, model.weights)])
    np.testing.assert_allclose(compiled(trees), want, atol=TOL, rtol=0)


def test_ternary_model_with_num_children():
    model = TreeMean3(H, V)
    lowered = model.lower(specialize_leaves=True)
    assert lowered.uses_num_children
    assert lowered.params[:3] == ["word", "children", "num_children"]
    func = lowered.func
    children = loads_of(func.body, "children")
    assert children and all(int(ld.source.shape[1]) == 3 for ld in children)
    leaves = [Node(word=w) for w in range(6)]
    trees = [
        Node(children=leaves[0:3]),
        Node(children=[Node(children=leaves[3:5]), Node(word=7)]),
        Node(children=[Node(children=[Node(word=8)]), Node(word=9), Node(children=[Node(word=1), Node(word=2), Node(word=3)])]),
        Node(word=5),
    ] + random_trees(10, (1, 20), seed=2, vocab_size=V)
    compiled = model.compile()
    want = mean3_reference(trees, model.weights)
    np.testing.assert_allclose(compiled(trees), np.stack([h[-1] for h in want]), atol=TOL, rtol=0)
    for got, w in zip(compiled(trees, all_nodes=True), want):
        np.testing.assert_allclose(got, w, atol=TOL, rtol=0)
    with pytest.raises(ValueError, match="children"):
        compiled([Node(children=[Node(word=1) for _ in range(4)])])


@pytest.mark.parametrize("specialize", [True, False])
def test_raw_primfunc_call_in_documented_param_order(specialize):
    """Build the lowered PrimFunc with tvm directly and call it with arrays in `params` order."""
    model = ct.models.TreeFC(hidden_size=16, vocab_size=V)
    lowered = model.lower(specialize_leaves=specialize)
    exe = tvm.compile(lowered.mod, target="llvm")
    func = exe[ct.lower.FUNC_NAME]
    trees = random_trees(6, (1, 15), seed=9, vocab_size=V)
    lin = ct.linearize.linearize(trees, 2, vocab_size=V)
    h = np.zeros((lin.num_slots, 16), np.float32)
    out = np.zeros((len(trees), 16), np.float32)
    args = {"word": lin.words, "children": lin.children, "num_children": lin.num_children,
            "level_offsets": lin.level_offsets, "roots": lin.roots, "max_level_size": lin.max_level_size,
            "h": h, "out": out, **model.weights}
    assert ("num_children" in lowered.params) == (not specialize)
    func(*[np.ascontiguousarray(args[p]) if isinstance(args[p], np.ndarray) else args[p]
           for p in lowered.params])
    np.testing.assert_allclose(out, ref.roots("TreeFC", trees, model.weights), atol=TOL, rtol=0)
    assert not h[0].any(), "the null slot stays zero"
