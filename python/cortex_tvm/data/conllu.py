"""CoNLL-U, the format of the Universal Dependencies treebanks: one dependency tree per sentence.

A sentence is a block of token lines (10 tab-separated fields: ID FORM LEMMA
UPOS XPOS FEATS HEAD DEPREL DEPS MISC) ended by a blank line.  Comment lines
(``# text = ...``), multiword-token ranges (ID ``2-3``) and empty nodes (ID
``1.1``) are skipped: the basic dependency tree uses only the word lines.
Every token becomes a :class:`Node` with its FORM as the word; the token
whose HEAD is 0 is the root and each token's children are its dependents in
ID order.
"""

from __future__ import annotations

import importlib.resources
import os
import re
from typing import Optional, Tuple

from .node import Node
from .ptb import decode, start_vocab

__all__ = ["parse_conllu", "load_conllu", "conllu_sample"]

_FIELDS = 10
_ID, _FORM, _HEAD, _DEPREL = 0, 1, 6, 7
_SKIPPED_ID = re.compile(r"[0-9]+(-[0-9]+|\.[0-9]+)")     # a multiword range or an empty node


def _sentence_tree(tokens: list, fail) -> Node:
    """The tree of one sentence; tokens are (form id, head, deprel, line) with IDs 1..n in order."""
    n = len(tokens)
    heads = [head for _, head, _, _ in tokens]
    roots = [i for i, head in enumerate(heads) if head == 0]
    if not roots:
        fail(tokens[0][3], "sentence has no root (no token with HEAD 0)")
    if len(roots) > 1:
        fail(tokens[roots[1]][3], f"sentence has two roots: tokens {roots[0] + 1} and {roots[1] + 1} "
                                  "both have HEAD 0")
    for i, head in enumerate(heads):
        if head > n:
            fail(tokens[i][3], f"HEAD {head} is not a token of this sentence (it has {n} tokens)")
    # Follow heads from every token; meeting the current walk again is a cycle.
    state = [0] * n            # 0 unvisited, 1 on the current walk, 2 reaches the root
    for start in range(n):
        walk, i = [], start
        while i >= 0 and state[i] == 0:
            state[i] = 1
            walk.append(i)
            i = heads[i] - 1
        if i >= 0 and state[i] == 1:
            fail(tokens[i][3], f"token {i + 1} is its own ancestor (a cycle in the HEAD column)")
        for j in walk:
            state[j] = 2
    nodes = [Node(word=word, label=deprel) for word, _, deprel, _ in tokens]
    dependents = [[] for _ in range(n)]
    for i, head in enumerate(heads):        # ID order, so children come out in ID order
        if head:
            dependents[head - 1].append(nodes[i])
    for node, kids in zip(nodes, dependents):
        if kids:
            node.children = kids
    return nodes[roots[0]]


def parse_conllu(text: str, vocab: Optional[dict] = None, *, source: str = "CoNLL-U text") -> Tuple[list, dict]:
    """Parse CoNLL-U text into one tree per sentence (see the module doc).

    Words (FORM) get ids from ``vocab`` (str -> int), created when None and
    extended in order of first appearance; ``node.label`` is the token's
    DEPREL.  Returns ``(trees, vocab)``.  A malformed line, a HEAD outside the
    sentence, a cycle or two roots raise ValueError naming ``source`` and the line.
    """
    vocab, next_id = start_vocab("parse_conllu", text, vocab)

    def fail(lineno, what):
        raise ValueError(f"{source}, line {lineno}: {what}")

    trees, tokens = [], []
    lines = text.split("\n")
    for lineno, line in enumerate(lines + [""], start=1):
        line = line.rstrip("\r")
        if not line.strip():
            if tokens:
                trees.append(_sentence_tree(tokens, fail))
                tokens = []
            continue
        if line.startswith("#"):
            continue
        fields = line.split("\t")
        if len(fields) != _FIELDS:
            fail(lineno, f"expected {_FIELDS} tab-separated fields, found {len(fields)}")
        token_id = fields[_ID]
        if _SKIPPED_ID.fullmatch(token_id):
            continue
        if not token_id.isdigit() or int(token_id) != len(tokens) + 1:
            fail(lineno, f"ID {token_id!r}: expected {len(tokens) + 1} (IDs count 1, 2, ... in each sentence)")
        head = fields[_HEAD]
        if not head.isdigit():
            fail(lineno, f"HEAD {head!r} is not a token number")
        if int(head) == int(token_id):
            fail(lineno, f"token {token_id} is its own head (a cycle in the HEAD column)")
        form = fields[_FORM]
        if not form:
            fail(lineno, "empty FORM")
        word_id = vocab.get(form)
        if word_id is None:
            word_id = vocab[form] = next_id
            next_id += 1
        tokens.append((word_id, int(head), fields[_DEPREL], lineno))
    return trees, vocab


def load_conllu(path, vocab: Optional[dict] = None, *, encoding: str = "utf-8") -> Tuple[list, dict]:
    """Read a CoNLL-U file (a Universal Dependencies treebank): ``(trees, vocab)``, one tree per
    sentence, a word on every node; see :func:`parse_conllu`.  Bad bytes, malformed lines,
    cycles and sentences with two roots raise ValueError naming the path and line."""
    path = os.fspath(path)
    with open(path, "rb") as f:
        data = f.read()
    return parse_conllu(decode(data, encoding, path), vocab, source=path)


def conllu_sample() -> Tuple[list, dict]:
    """The bundled CoNLL-U sample (a dozen English sentences in UD format): ``(trees, vocab)``."""
    text = importlib.resources.files(__package__).joinpath("ud_sample.conllu").read_text(encoding="utf-8")
    return parse_conllu(text, source="ud_sample.conllu")
