"""Bracketed treebanks (Penn Treebank, SST): ``(S (NP (DT The) (NN cat)) (VP (VBD sat)))``.

Each bracket is ``(label word)`` (a leaf) or ``(label subtree ...)``; labels
may be integers (SST sentiment classes, kept as ``int``) or strings (phrase
and POS tags, kept as ``str``), and may be empty (the ``( (S ...) )`` wrapper
of Penn Treebank files, kept as None).  A tree may span several lines; a new
tree starts on a new line.  The tree is kept as written: a unary node stays a
node with one child unless ``collapse_unary=True``.
"""

from __future__ import annotations

import importlib.resources
import os
from typing import Optional, Tuple

from .node import Node

__all__ = ["parse_ptb", "load_ptb", "sst_sample", "decode"]


def decode(data: bytes, encoding: str, source: str) -> str:
    """``data`` decoded, or ValueError naming ``source`` and the line of the first bad byte."""
    try:
        return data.decode(encoding)
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        column = err.start - (data.rfind(b"\n", 0, err.start) + 1) + 1
        raise ValueError(f"{source}, line {line}: not valid {encoding} text: byte "
                         f"0x{data[err.start]:02x} at column {column} ({err.reason}); pass "
                         "encoding= with the file's encoding (e.g. 'latin-1')") from None
    except LookupError:
        raise ValueError(f"{source}: unknown encoding {encoding!r}") from None


def _tokens(text: str):
    """(token, line number) pairs.  Only ASCII spaces and tabs separate tokens: SST
    words may contain U+00A0."""
    for lineno, line in enumerate(text.split("\n"), start=1):
        line = line.rstrip("\r").replace("\t", " ")
        for tok in line.replace("(", " ( ").replace(")", " ) ").split(" "):
            if tok:
                yield tok, lineno


def _label(tok: str):
    return int(tok) if tok.lstrip("-").isdecimal() else tok


def _collapsed(node: Node) -> Node:
    """A unary chain from ``node`` down as one node: the bottom's word or children, the label of
    the topmost node that has one (so ``( (S ...))`` keeps S).  Called bottom-up, so the
    bottom's own children are already collapsed."""
    bottom, label = node, node.label
    while bottom.children is not None and len(bottom.children) == 1 and bottom.word is None:
        bottom = bottom.children[0]
        label = bottom.label if label is None else label
    if bottom is node:
        return node
    return Node(word=bottom.word, children=bottom.children, label=label)


def start_vocab(who: str, text, vocab) -> tuple:
    """(vocab, next free id) for a reader that adds words to `vocab` (a new dict when None);
    TypeError for text that is not a str or a vocab that is not a dict."""
    if not isinstance(text, str):
        raise TypeError(f"{who} expects str text, got {type(text).__name__}")
    if vocab is None:
        vocab = {}
    elif not isinstance(vocab, dict):
        raise TypeError(f"vocab must be a dict str -> int, got {type(vocab).__name__}")
    return vocab, max(vocab.values()) + 1 if vocab else 0


def parse_ptb(text: str, vocab: Optional[dict] = None, *, collapse_unary: bool = False,
              source: str = "PTB text") -> Tuple[list, dict]:
    """Parse bracketed trees, e.g. ``(3 (2 It) (2 works))`` or ``(S (NP (PRP It)) (VP (VBZ works)))``.

    Words get ids from ``vocab`` (str -> int), which is created when None and
    extended in order of first appearance; labels are kept as ``node.label``
    (int for integer labels, str otherwise, None when empty).  A unary node
    stays a node with one child (a binary model reads zero state for the
    missing child); ``collapse_unary=True`` replaces each chain of one-child
    nodes by one node with the bottom node's word or children and the label of
    the topmost node that has one.  Returns ``(trees, vocab)``.  Malformed
    text raises ValueError naming ``source`` and the line.
    """
    vocab, next_id = start_vocab("parse_ptb", text, vocab)
    trees = []
    stack = []              # open brackets: [label, word, children, line]
    tree_line = 0           # line where the last tree ended (text after it there is an error)
    pending_label = False   # the token after '(' is its label

    def fail(lineno, what):
        raise ValueError(f"{source}, line {lineno}: {what}")

    for tok, lineno in _tokens(text):
        if pending_label:
            pending_label = False
            if tok != "(" and tok != ")":
                stack[-1][0] = _label(tok)
                continue
            # an empty label: this token opens or closes a bracket
        if tok == "(":
            if not stack and lineno == tree_line:
                fail(lineno, f"unexpected text after the tree ends: {tok!r}")
            if stack and stack[-1][1] is not None:
                fail(lineno, "a bracket cannot have both a word and subtrees")
            stack.append([None, None, [], lineno])
            pending_label = True
        elif tok == ")":
            if not stack:
                fail(lineno, "unbalanced parentheses: too many ')'")
            label, word, children, _ = stack.pop()
            if word is not None:
                node = Node(word=word, label=label)
            elif children:
                node = Node(children=children, label=label)
                if collapse_unary:
                    node = _collapsed(node)
            else:
                fail(lineno, f"node with label {label!r} has neither a word nor subtrees")
            if stack:
                stack[-1][2].append(node)
            else:
                trees.append(node)
                tree_line = lineno
        else:
            if not stack:
                if lineno == tree_line:
                    fail(lineno, f"unexpected text after the tree ends: {tok!r}")
                fail(lineno, f"a tree must start with '(' (found word {tok!r} outside parentheses)")
            frame = stack[-1]
            if frame[1] is not None:
                fail(lineno, f"a leaf has more than one word ({tok!r})")
            if frame[2]:
                fail(lineno, "a bracket cannot have both a word and subtrees")
            word_id = vocab.get(tok)
            if word_id is None:
                word_id = vocab[tok] = next_id
                next_id += 1
            frame[1] = word_id
    if stack:
        fail(stack[0][3], "unbalanced parentheses: missing ')' (the tree starting here is never closed)")
    return trees, vocab


def load_ptb(path, vocab: Optional[dict] = None, *, collapse_unary: bool = False,
             encoding: str = "utf-8") -> Tuple[list, dict]:
    """Read a bracketed treebank file; see :func:`parse_ptb`.

    Bytes that are not valid ``encoding`` raise ValueError naming the path and line.
    """
    path = os.fspath(path)
    with open(path, "rb") as f:
        data = f.read()
    return parse_ptb(decode(data, encoding, path), vocab, collapse_unary=collapse_unary, source=path)


_sst_cache: Optional[Tuple[list, dict]] = None


def sst_sample() -> Tuple[list, dict]:
    """The bundled 1101 SST dev trees and their vocabulary, parsed once and cached.

    Returns fresh list/dict objects each call; the Node objects are shared.
    """
    global _sst_cache
    if _sst_cache is None:
        text = importlib.resources.files(__package__).joinpath("sst_dev.txt").read_text(encoding="utf-8")
        _sst_cache = parse_ptb(text, source="sst_dev.txt")
    trees, vocab = _sst_cache
    return list(trees), dict(vocab)
