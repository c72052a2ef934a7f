"""Real treebanks: Penn-style brackets with string labels and unary chains, CoNLL-U dependency trees.

Penn trees run through the binary models against the independent float64 reference in
tests/reference.py (a unary node's missing right child reads zero state); every malformed
input is a ValueError naming the path and the line.
"""
import numpy as np
import pytest

import cortex_tvm as ct
from cortex_tvm.data import Node, load_conllu, load_ptb, parse_conllu, parse_ptb, postorder

import reference as ref

PENN = """\
( (S (NP-SBJ (DT The) (NN cat))
     (VP (VBD sat)
         (PP (IN on) (NP (DT the) (NN mat))))) )
(ROOT (S (NP (PRP It)) (VP (VBZ works))))
(3 (2 It) (4 (2 's) (3 fine)))
"""


def _shape(tree):
    """(label, word, number of children) per node, postorder."""
    return [(n.label, n.word, 0 if n.children is None else len(n.children)) for n in postorder(tree)]


# ---------------------------------------------------------------- PTB

def test_penn_string_labels_and_unary_nodes_kept():
    trees, vocab = parse_ptb(PENN)
    assert len(trees) == 3 and list(vocab)[:4] == ["The", "cat", "sat", "on"]
    first = trees[0]
    assert first.label is None and len(first.children) == 1          # the "( (S ...) )" wrapper
    s = first.children[0]
    assert s.label == "S" and [c.label for c in s.children] == ["NP-SBJ", "VP"]
    vbd = s.children[1].children[0]
    assert vbd.label == "VBD" and vbd.word == vocab["sat"] and vbd.is_leaf
    # (ROOT (S (NP (PRP It)) (VP (VBZ works)))): every bracket with one child stays a node
    assert _shape(trees[1]) == [("PRP", vocab["It"], 0), ("NP", None, 1), ("VBZ", vocab["works"], 0),
                                ("VP", None, 1), ("S", None, 2), ("ROOT", None, 1)]
    assert [type(n.label) for n in postorder(trees[2])] == [int] * 5       # SST labels stay ints


def test_collapse_unary():
    trees, vocab = parse_ptb(PENN, collapse_unary=True)
    # ROOT -> S collapses to one node labelled ROOT; NP -> PRP(It) to a leaf labelled NP
    assert _shape(trees[1]) == [("NP", vocab["It"], 0), ("VP", vocab["works"], 0), ("ROOT", None, 2)]
    assert trees[0].label == "S" and len(trees[0].children) == 2          # an empty label takes S's
    assert all(len(n.children) != 1 for t in trees for n in postorder(t) if n.children)
    assert _shape(trees[2]) == _shape(parse_ptb(PENN)[0][2])               # nothing to collapse


def test_tree_spanning_lines_and_text_after_a_tree():
    trees, _ = parse_ptb("(A\n (B x)\n (C y))\n(D z)\n")
    assert [t.label for t in trees] == ["A", "D"]
    with pytest.raises(ValueError, match="PTB text, line 1: unexpected text after the tree ends"):
        parse_ptb("(A x) (B y)")
    with pytest.raises(ValueError, match="line 2: unbalanced parentheses: missing"):
        parse_ptb("(A x)\n(B (C y)\n\n")


@pytest.mark.parametrize("model_name", ["TreeLSTM", "TreeFC"])
@pytest.mark.parametrize("collapse", [False, True])
def test_penn_trees_through_binary_models(model_name, collapse):
    """Unary nodes: the binary models read zero state for the missing right child."""
    trees, vocab = parse_ptb(PENN, collapse_unary=collapse)
    model = getattr(ct.models, model_name)(hidden_size=16, vocab_size=len(vocab))
    got = model.compile()(trees, all_nodes=True)
    want = ref.all_h(model_name, trees, model.weights)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, atol=1e-5, rtol=0)


def test_load_ptb_encoding(tmp_path):
    path = tmp_path / "latin1.txt"
    path.write_bytes("(NP (NN caf\u00e9) (NN cr\u00e8me))\n".encode("latin-1"))
    trees, vocab = load_ptb(path, encoding="latin-1")
    assert list(vocab) == ["caf\u00e9", "cr\u00e8me"]
    path.write_bytes(b"(NP (NN ok))\n(NP (NN caf\xe9))\n")
    with pytest.raises(ValueError, match=f"{path}, line 2: not valid utf-8 text: byte 0xe9 at column 12"):
        load_ptb(path)
    with pytest.raises(ValueError, match="unknown encoding 'klingon'"):
        load_ptb(path, encoding="klingon")


@pytest.mark.parametrize("text, line, match", [
    ("(S (NP a) (VP b)\n", 1, "missing '\\)'"),
    ("(S a)\n(S b))\n", 2, "too many '\\)'"),
    ("(S a b)", 1, "more than one word"),
    ("(S a (NP b))", 1, "both a word and subtrees"),
    ("(S\n  (NP b)\n  c)", 3, "both a word and subtrees"),
    ("(S)", 1, "neither a word nor subtrees"),
    ("word (S b)", 1, "must start with"),
])
def test_load_ptb_errors_name_path_and_line(tmp_path, text, line, match):
    path = tmp_path / "bad.mrg"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ValueError, match=f"{path}, line {line}: .*{match}"):
        load_ptb(path)


# ---------------------------------------------------------------- CoNLL-U

CONLLU = """\
# newdoc id = test
# sent_id = 1
# text = We're gonna win.
1\tWe\twe\tPRON\t_\t_\t3\tnsubj\t_\t_
2\t're\tbe\tAUX\t_\t_\t3\taux\t_\t_
3-4\tgonna\t_\t_\t_\t_\t_\t_\t_\t_
3\tgon\tgo\tVERB\t_\t_\t0\troot\t_\t_
4\tna\tto\tPART\t_\t_\t5\tmark\t_\t_
5\twin\twin\tVERB\t_\t_\t3\txcomp\t_\tSpaceAfter=No
6\t.\t.\tPUNCT\t_\t_\t3\tpunct\t_\t_

# sent_id = 2
1\tJohn\tJohn\tPROPN\t_\t_\t2\tnsubj\t_\t_
2\tlikes\tlike\tVERB\t_\t_\t0\troot\t_\t_
3\ttea\ttea\tNOUN\t_\t_\t2\tobj\t_\t_
3.1\tlikes\tlike\tVERB\t_\t_\t_\t_\t2:conj\t_
4\twe\twe\tPRON\t_\t_\t2\tconj\t_\t_
"""


def test_conllu_trees_skip_comments_ranges_and_empty_nodes():
    trees, vocab = parse_conllu(CONLLU)
    assert len(trees) == 2
    assert list(vocab) == ["We", "'re", "gon", "na", "win", ".", "John", "likes", "tea", "we"]
    root = trees[0]
    assert root.word == vocab["gon"] and root.label == "root"
    # children of 'gon' in ID order: We(1), 're(2), win(5), .(6); 'na' hangs under 'win'
    assert [c.word for c in root.children] == [vocab[w] for w in ("We", "'re", "win", ".")]
    win = root.children[2]
    assert [c.word for c in win.children] == [vocab["na"]] and win.label == "xcomp"
    assert sum(1 for _ in postorder(root)) == 6                      # the range line is not a token
    assert [n.word for n in postorder(trees[1])] == [vocab[w] for w in ("John", "tea", "we", "likes")]
    assert vocab["we"] != vocab["We"]                                 # FORM as written


def test_conllu_sample_and_load(tmp_path):
    trees, vocab = ct.data.conllu_sample()
    assert len(trees) == 12 and all(n.word is not None for t in trees for n in postorder(t))
    path = tmp_path / "s.conllu"
    path.write_text(CONLLU, encoding="utf-8")
    loaded, v2 = load_conllu(path, vocab={"win": 0})
    assert v2["win"] == 0 and v2["We"] == 1 and len(loaded) == 2


@pytest.mark.parametrize("lines, bad_line, match", [
    (["1\tA\ta\tX\t_\t_\t0\troot\t_"], 1, "expected 10 tab-separated fields, found 9"),
    (["1 A a X _ _ 0 root _ _"], 1, "expected 10 tab-separated fields, found 1"),
    (["1\tA\ta\tX\t_\t_\t0\troot\t_\t_", "3\tB\tb\tX\t_\t_\t1\tdep\t_\t_"], 2, "ID '3': expected 2"),
    (["x\tA\ta\tX\t_\t_\t0\troot\t_\t_"], 1, "ID 'x'"),
    (["1\tA\ta\tX\t_\t_\t_\troot\t_\t_"], 1, "HEAD '_' is not a token number"),
    (["1\tA\ta\tX\t_\t_\t0\troot\t_\t_", "2\tB\tb\tX\t_\t_\t7\tdep\t_\t_"], 2, "HEAD 7 is not a token"),
    (["1\tA\ta\tX\t_\t_\t1\troot\t_\t_"], 1, "its own head"),
    (["1\tA\ta\tX\t_\t_\t0\troot\t_\t_", "2\tB\tb\tX\t_\t_\t0\troot\t_\t_"], 2, "two roots"),
    (["1\tA\ta\tX\t_\t_\t2\tdep\t_\t_", "2\tB\tb\tX\t_\t_\t1\tdep\t_\t_"], 1, "no root"),
    (["1\tA\ta\tX\t_\t_\t0\troot\t_\t_", "2\tB\tb\tX\t_\t_\t3\tdep\t_\t_",
      "3\tC\tc\tX\t_\t_\t2\tdep\t_\t_"], 2, "cycle"),
    (["1\t\ta\tX\t_\t_\t0\troot\t_\t_"], 1, "empty FORM"),
])
def test_conllu_errors_name_path_and_line(tmp_path, lines, bad_line, match):
    path = tmp_path / "bad.conllu"
    # two lines of a good sentence first: the reported line counts them
    good = "# ok\n1\tok\tok\tX\t_\t_\t0\troot\t_\t_\n\n"
    path.write_text(good + "\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(ValueError, match=f"{path}, line {bad_line + 3}: .*{match}"):
        load_conllu(path)


def test_conllu_bad_bytes_name_path_and_line(tmp_path):
    path = tmp_path / "bad.conllu"
    path.write_bytes(b"# ok\n1\tcaf\xe9\tx\tX\t_\t_\t0\troot\t_\t_\n")
    with pytest.raises(ValueError, match=f"{path}, line 2: not valid utf-8"):
        load_conllu(path)
    assert load_conllu(path, encoding="latin-1")[1] == {"caf\u00e9": 0}


def test_dependency_tree_needs_a_model_that_reads_inner_words():
    trees, vocab = ct.data.conllu_sample()
    fc = ct.models.TreeFC(hidden_size=8, vocab_size=len(vocab))
    dependency = Node(word=1, children=[Node(word=2), Node(word=3)])
    with pytest.raises(ValueError, match="tree 1: a node has both a word and children.*only at leaves"):
        fc.reference([Node(word=0), dependency])
    lin = ct.models.ChildSumTreeLSTM(8, len(vocab), max_children=6).linearize(trees)
    assert (lin.words[1:lin.num_slots] < len(vocab)).all()           # every dependency node has a word
