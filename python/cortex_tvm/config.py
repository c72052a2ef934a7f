"""Every environment variable cortex_tvm reads, in one place."""
from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class Config:
    #: threads of TVM's runtime pool (TVM itself defaults to 1 here)
    num_threads: int
    #: folder for the on-disk compile cache ("" = no disk cache)
    cache_dir: str


def _int(name, default):
    raw = os.environ.get(name, "")
    try:
        return int(raw) if raw else default
    except ValueError:
        raise ValueError(f"environment variable {name}={raw!r} is not an integer") from None


def load() -> Config:
    return Config(
        num_threads=_int("TVM_NUM_THREADS", os.cpu_count() or 1),
        cache_dir=os.environ.get("CORTEX_TVM_CACHE_DIR", ""),
    )


def use_all_cores():
    """Give TVM's thread pool every core unless TVM_NUM_THREADS says otherwise.

    TVM reads the variable when its pool starts, so call this before the
    first kernel runs (the CLI does).
    """
    os.environ.setdefault("TVM_NUM_THREADS", str(load().num_threads))
