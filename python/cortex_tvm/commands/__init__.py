"""The `cortex-tvm` commands, one module each, loaded by `cli.main` only once chosen.

`demo`, `show` and `tune` import the compiler at their top, so `cli.py` never imports them itself:
it looks the chosen one up in its table (`cli.COMMANDS`) and imports that one module (`bench` is
`bench/run.py`'s).  This module and `user_model.py` stay light (no TVM): the parser reads
`DEFAULT_HIDDEN`, and `cli` re-exports `UsageError` and `user_model`.
"""
from __future__ import annotations


class UsageError(Exception):
    """A bad command line: printed as one line, exit status 2."""


#: the zoo's default hidden size for each command (a user model has its own sizes)
DEFAULT_HIDDEN = {"show": 64, "tune": 256}
