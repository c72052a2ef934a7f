"""The MODEL argument of `show` and `tune`: a zoo model's name, or a user's `MODULE:NAME`."""
from __future__ import annotations

from ..bench.cases import MODEL_CLASSES, make_model
from . import DEFAULT_HIDDEN, UsageError
from .user_model import user_model


def model_from_arg(name, hidden, vocab_size, command: str = "tune"):
    """A zoo model by name (at `command`'s default hidden size unless `hidden` is given), or a
    user's model from `MODULE:NAME` (see `user_model`), which has its own sizes."""
    if ":" in name:
        if hidden is not None:
            raise UsageError(f"--hidden applies to zoo models; {name} has its own sizes")
        return user_model(name)
    key = name.lower()
    if key not in MODEL_CLASSES:
        raise UsageError(f"unknown model {name!r}; models: {sorted(MODEL_CLASSES)}, or MODULE:NAME")
    return make_model(key, DEFAULT_HIDDEN[command] if hidden is None else hidden, vocab_size)
