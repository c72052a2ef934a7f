"""Where in the user's function something happened: the line named in every trace error.

Symbolic tensors record the line that made them, and errors raised while the
user's function runs name the line that is running.  Both come from the
innermost stack frame outside this package, which is the user's code (their
cell, or a helper function it calls).
"""
from __future__ import annotations

import linecache
import os
import sys
import threading
from dataclasses import dataclass

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


@dataclass(frozen=True)
class Where:
    """A line of user code: file, line number, function name, and the traced cell's own line
    when the code is a helper the cell called (`via`)."""

    filename: str
    lineno: int
    function: str
    via: "Where | None" = None

    def line(self) -> str:
        """`function, line N of file.py: source text`"""
        code = linecache.getline(self.filename, self.lineno).strip()
        text = f"{self.function}, line {self.lineno} of {os.path.basename(self.filename)}"
        return f"{text}: {code}" if code else text

    def __str__(self) -> str:
        return f"in {self.line()}" + (f"; called from {self.via.line()}" if self.via else "")


class _Cell(threading.local):
    code = None           # the code object of the cell being traced (set by trace.py)


cell = _Cell()


def _where(frame, via=None) -> Where:
    return Where(frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name, via)


def caller() -> Where | None:
    """The innermost frame that is not in cortex_tvm.frontend (None if there is none); when that
    is a helper, the line of the traced cell that called it comes along."""
    frame = sys._getframe(1)
    while frame is not None and os.path.dirname(os.path.abspath(frame.f_code.co_filename)) == _PACKAGE_DIR:
        frame = frame.f_back
    if frame is None:
        return None
    outer = frame.f_back
    while cell.code is not None and frame.f_code is not cell.code and outer is not None:
        if outer.f_code is cell.code:
            return _where(frame, _where(outer))
        outer = outer.f_back
    return _where(frame)


def located(message: str, where: Where | None = None) -> str:
    """`message` followed by the user's line (the running one unless `where` is given)."""
    where = where or caller()
    return f"{message} ({where})" if where else message


def type_error(message: str, where: Where | None = None) -> TypeError:
    return TypeError(located(message, where))


def value_error(message: str, where: Where | None = None) -> ValueError:
    return ValueError(located(message, where))


class UnsupportedAttribute(TypeError, AttributeError):
    """An attribute the tracer cannot follow: a TypeError for the user, and still an
    AttributeError so that `hasattr` and friends keep working on traced objects."""
