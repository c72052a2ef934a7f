"""Auto-tuning of recipe knobs, split by role as in TVM's meta_schedule:

`space` (the knob space, invalid points pruned), `features` + `cost_model`
(xgboost ranking), `measure` (build + time; failures are inf), `database`
(JSON-lines log), `search` (warm-up, then model-guided rounds), `apply`
(a log's best record -> a recipe; `model.compile(tuning_log=...)`).

    import cortex_tvm as ct
    from cortex_tvm import tune
    model = ct.models.TreeLSTM(hidden_size=256, vocab_size=5374)
    best = tune.tune(model, trials=32, log="tuning.jsonl")
    compiled = model.compile(tuning_log="tuning.jsonl")
"""
from __future__ import annotations

import sys

from ..target import make_target
from .adaptive import AdaptiveModel
from .apply import SHIPPED, apply_best, recipe_from_log
from .cost_model import CostModel, spearman
from .database import Database, TuningRecord
from .features import WorkloadStats
from .measure import MeasureResult, Measurer, tuning_batches
from .rpc import RPCMeasurer
from .search import SearchConfig, search
from .space import Space, TuningPoint
from .workload import Workload

__all__ = ["tune", "AdaptiveModel", "apply_best", "recipe_from_log", "SHIPPED", "Space", "TuningPoint", "Workload",
           "CostModel", "spearman", "Database", "TuningRecord", "Measurer", "RPCMeasurer", "MeasureResult",
           "WorkloadStats", "SearchConfig", "search", "tuning_batches"]


def tune(model, trials: int = 32, log="tuning.jsonl", trees=None, batch_size: int = 10, target="llvm",
         seconds: float | None = None, seed: int = 0, repeats: int = 5, max_batches: int = 16,
         knobs: dict | None = None, progress=True, rpc: tuple | None = None,
         confirm_rounds: int = 2, cross_compiler: str | None = None,
         precision: str = "fp32") -> TuningPoint | None:
    """Search the knobs of the model's recipe; every trial is appended to `log`.

    trials counts the records the log already has for this workload, so
    rerunning an interrupted tune finishes it.  Timing uses `trees` (default:
    the bundled SST sample) in batches of `batch_size`.  Returns the best
    point measured (None if every trial failed).  progress: True (a line per
    trial on stderr), False, or a file.  rpc: (tracker host, port, device key)
    to measure on a remote device through TVM's RPC tracker (see `tune.rpc`);
    cross_compiler: the C++ compiler that links the kernel for that device
    (e.g. "aarch64-linux-gnu-g++"; default: the host's).  precision: as `Model.compile`;
    the records are keyed by it.
    At the end the four fastest points and the default are built once more and
    timed in turn for `confirm_rounds` rounds (one extra log record each, marked
    `in_turn`); the fastest of them in those rounds is the winner, so one lucky
    trial on a drifting machine does not pick it.
    """
    progress = sys.stderr if progress is True else (progress or None)
    tgt = make_target(target)
    batches = tuning_batches(model, trees, batch_size, max_batches)
    space = Space(model, tgt, knobs=knobs, precision=precision)
    if rpc is None:
        measurer = Measurer(model, batches, tgt, repeats=repeats)
    elif model.lower(specialize_leaves=False).node_features:
        raise ValueError("tune: measuring through RPC does not send per-node features, so every point of a model "
                         "fed features would fail there; tune it on this machine (rpc=None)")
    else:
        host, port, key = rpc
        measurer = RPCMeasurer(model, batches, tgt, repeats=repeats, tracker_host=host, tracker_port=port, key=key,
                               cc=cross_compiler)
    workload = Workload.of(model, tgt, batch_size, precision)
    config = SearchConfig(trials=trials, seconds=seconds, seed=seed, confirm_rounds=confirm_rounds)
    # the kernel's sizes (padded to the vector width), as compile() and the cost data see them
    stats = WorkloadStats.of(space.padded_model, batches)
    best = search(space, measurer, Database(log), workload, stats, config, progress)
    if progress is not None and best is not None:
        print(f"tune: trials written to {log}", file=progress)
    return None if best is None else best.point
