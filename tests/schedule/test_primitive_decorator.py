"""@primitive: every RecSchedule primitive checks its argument types, turns any error raised while
it applies into a ScheduleError naming it, and is recorded (with its bound arguments) only when
it succeeds.  Table-driven over every public primitive."""
import inspect
from dataclasses import dataclass, field

import pytest
import tvm

import cortex_tvm as ct
from cortex_tvm import gpu_rewrites, tir_rewrites
from cortex_tvm import amx_bf16_kernel as amx_bf16_module
from cortex_tvm import dot_bf16 as dot_bf16_module
from cortex_tvm import fast_math as fast_math_module
from cortex_tvm.schedule import RecSchedule, Step, kernels, program
from cortex_tvm.schedule.core import primitive

MODELS = {"TreeFC": lambda: ct.models.TreeFC(hidden_size=16, vocab_size=10),
          "TreeLSTM": lambda: ct.models.TreeLSTM(hidden_size=16, vocab_size=10),
          "ChildSum": lambda: ct.models.ChildSumTreeLSTM(16, 10, max_children=3),
          "MVRNN": lambda: ct.models.MVRNN(hidden_size=16, vocab_size=10)}
_LOWERED = {}


def fresh(model):
    if model not in _LOWERED:
        _LOWERED[model] = MODELS[model]().lower(specialize_leaves=False)
    return RecSchedule(_LOWERED[model])


def unchanged(rs):
    return rs


def specialized(rs):
    return rs.specialize_leaves()


def fc_tiled(rs):
    return rs.specialize_leaves().pack("W", axis=0, tile=16).tile_gemm("internal_h_sum", node_tile=2,
                                                                       column_tile=16, lanes=8)


def fc_tiled16(rs):
    return rs.specialize_leaves().pack("W", axis=0, tile=16).tile_gemm("internal_h_sum", node_tile=2,
                                                                       column_tile=16, lanes=16)


def lstm_before_amx(rs):
    """The steps compile(precision="bf16") takes for Sapphire Rapids, up to amx_bf16."""
    if "amx" not in _LOWERED:
        sapphire = {"kind": "llvm", "mtriple": "x86_64-linux-gnu", "mcpu": "sapphirerapids"}
        trace = MODELS["TreeLSTM"]().compile(target=sapphire, precision="bf16").trace
        _LOWERED["amx"] = trace[:[s["primitive"] for s in trace].index("amx_bf16")]
    for step in _LOWERED["amx"]:
        getattr(rs, step["primitive"])(**step["args"])
    return rs


def fc_columns(rs):
    return fc_tiled(rs).parallel_columns("W")


def packed(rs):
    return rs.specialize_leaves().pack("W", axis=0, tile=16)


def all_scopes_bound(rs):
    return rs.specialize_leaves().bind_nodes("leaves").bind_nodes("level").bind_nodes("roots")


@dataclass(frozen=True)
class Case:
    primitive: str
    model: str
    before: object                  # rs -> rs in a state the primitive applies to
    args: tuple                     # a call that applies
    recorded: dict                  # what the trace holds for it: every argument, defaults applied
    bad: dict                       # a call with an argument of the wrong type (or one too many) ...
    bad_message: str                # ... and what the ScheduleError says
    #: (object, attribute, error class): the call inside the primitive that is made to fail
    breaks: tuple = field(default=(tvm.s_tir.Schedule, "__init__", tvm.error.InternalError))


CASES = [
    Case("specialize_leaves", "TreeFC", unchanged, (), {},
         {"depth": 2}, "specialize_leaves: got an unexpected keyword argument 'depth'"),
    Case("hoist", "TreeFC", specialized, (), {"budget_mb": 64.0},
         {"budget_mb": "64"}, "hoist: argument 'budget_mb' must be float, got str '64'"),
    Case("dynamic_batch", "TreeFC", unchanged, (False,), {"enabled": False},
         {"enabled": 0}, "dynamic_batch: argument 'enabled' must be bool, got int 0",
         (program, "replace", ValueError)),
    Case("pack", "TreeFC", specialized, ("W", 0, 16), {"weight": "W", "axis": 0, "tile": 16, "groups": 1},
         {"weight": "W", "tile": 16.0}, "pack: argument 'tile' must be int, got float 16.0"),
    Case("store_bf16", "TreeFC", packed, (), {"weight": None},
         {"weight": 3}, "store_bf16: argument 'weight' must be str or None, got int 3",
         (tir_rewrites, "store_bf16", ValueError)),
    Case("dot_bf16", "TreeFC", fc_tiled16, (), {"weight": None, "round_once_only": False},
         {"weight": 3}, "dot_bf16: argument 'weight' must be str or None, got int 3",
         (dot_bf16_module, "pack_pairs", ValueError)),
    Case("amx_bf16", "TreeLSTM", lstm_before_amx, (), {},
         {"weight": "W"}, "amx_bf16: got an unexpected keyword argument 'weight'",
         (amx_bf16_module, "rewrite", ValueError)),
    Case("dense_index", "TreeFC", specialized, ("child_sum",), {"tensor": "child_sum"},
         {"tensor": None}, "dense_index: argument 'tensor' must be str, got NoneType None",
         (tir_rewrites, "dense_index", ValueError)),
    Case("pad_levels", "TreeFC", specialized, (2,), {"multiple": 2},
         {"multiple": True}, "pad_levels: argument 'multiple' must be int, got bool True"),
    Case("level_tails", "TreeFC", specialized, (2,), {"multiple": 2},
         {"multiple": True}, "level_tails: argument 'multiple' must be int, got bool True"),
    Case("fast_math", "TreeFC", specialized, (), {},
         {"exact": False}, "fast_math: got an unexpected keyword argument 'exact'",
         (fast_math_module, "rewrite", TypeError)),
    Case("tile_gemm", "TreeFC", specialized, ("internal_h_sum", 2, 16, 8),
         {"block": "internal_h_sum", "node_tile": 2, "column_tile": 16, "lanes": 8, "k_unroll": 8},
         {"block": "internal_h_sum", "lanes": "8"}, "tile_gemm: argument 'lanes' must be int, got str '8'",
         (tvm.s_tir.Schedule, "split", tvm.s_tir.ScheduleError)),
    Case("vectorize_block", "TreeFC", specialized, ("child_sum", 8), {"block": "child_sum", "lanes": 8},
         {"block": 3}, "vectorize_block: argument 'block' must be str, got int 3",
         (tvm.s_tir.Schedule, "vectorize", tvm.s_tir.ScheduleError)),
    Case("vectorize_reduction", "ChildSum", specialized, ("h_sum",),
         {"block": "h_sum", "lanes": 16, "rows": 1, "vectors": 1},
         {"block": "h_sum", "lanes": 16.0}, "vectorize_reduction: argument 'lanes' must be int, got float",
         (tvm.s_tir.Schedule, "reorder", tvm.s_tir.ScheduleError)),
    Case("parallel_columns", "TreeFC", fc_tiled, ("W",), {"weight": "W"},
         {"weight": b"W"}, "parallel_columns: argument 'weight' must be str, got bytes",
         (tvm.s_tir.Schedule, "parallel", tvm.s_tir.ScheduleError)),
    Case("parallel_nodes", "MVRNN", specialized, ("internal_A_sum",), {"block": "internal_A_sum"},
         {"block": 1.0}, "parallel_nodes: argument 'block' must be str, got float",
         (tvm.s_tir.Schedule, "parallel", tvm.s_tir.ScheduleError)),
    Case("unroll_levels", "TreeFC", specialized, (2,), {"depth": 2},
         {"depth": 2.0}, "unroll_levels: argument 'depth' must be int, got float 2.0",
         (tvm.s_tir.Schedule, "unroll", tvm.s_tir.ScheduleError)),
    Case("unroll_recursion", "TreeFC", specialized, (2,), {"depth": 2, "chunks": 2},
         {"depth": 2, "chunks": "2"}, "unroll_recursion: argument 'chunks' must be int, got str '2'",
         (kernels, "unrolled_region", ValueError)),
    Case("peel", "TreeFC", fc_tiled, ("internal_h_sum",), {"block": "internal_h_sum"},
         {"block": ["internal_h_sum"]}, "peel: argument 'block' must be str, got list"),
    Case("per_level_kernels", "TreeFC", specialized, (), {},
         {"levels": 2}, "per_level_kernels: got an unexpected keyword argument 'levels'",
         (kernels, "replace", ValueError)),
    Case("persistent_threads", "TreeFC", fc_columns, (), {},
         {"barrier": True}, "persistent_threads: got an unexpected keyword argument 'barrier'",
         (kernels, "persistent_region", ValueError)),
    Case("single_kernel", "TreeFC", specialized, (), {"blocks": 132},        # CPU: the default structure
         {"blocks": "132"}, "single_kernel: argument 'blocks' must be int, got str '132'",
         (kernels, "replace", ValueError)),
    Case("single_kernel", "TreeFC", all_scopes_bound, (4,), {"blocks": 4},   # GPU: one persistent kernel
         {"blocks": 4.0}, "single_kernel: argument 'blocks' must be int, got float 4.0",
         (gpu_rewrites, "persistent_kernel", ValueError)),
    Case("bind_nodes", "TreeFC", specialized, ("level", 16),
         {"scope": "level", "threads": 16, "local_accumulators": True},
         {"scope": "level", "local_accumulators": 1}, "bind_nodes: argument 'local_accumulators' must be bool",
         (tvm.s_tir.Schedule, "bind", tvm.s_tir.ScheduleError)),
    Case("bind_packs", "TreeFC", packed, (128,), {"threads": 128},
         {"threads": "128"}, "bind_packs: argument 'threads' must be int, got str '128'",
         (tvm.s_tir.Schedule, "bind", tvm.s_tir.ScheduleError)),
]
IDS = [f"{c.primitive}-{c.before.__name__}" for c in CASES]


def steps(rs):
    return [s.as_json() for s in rs.trace]


def test_every_primitive_has_a_case():
    marked = {name for name in dir(RecSchedule) if getattr(getattr(RecSchedule, name), "is_primitive", False)}
    assert marked == {c.primitive for c in CASES}


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_success_records_exactly_the_bound_args_and_replays(case):
    rs = case.before(fresh(case.model))
    before = steps(rs)
    assert getattr(rs, case.primitive)(*case.args) is rs
    assert rs.trace[len(before):] == [Step(case.primitive, case.recorded)]
    replayed = fresh(case.model).replay(rs.trace_json())
    tvm.ir.assert_structural_equal(replayed.func, rs.func)
    assert replayed.plan == rs.plan and steps(replayed) == steps(rs)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_wrong_type_names_primitive_and_argument(case):
    rs = case.before(fresh(case.model))
    before, func = steps(rs), rs.func
    with pytest.raises(ct.ScheduleError, match=case.bad_message.replace("(", "\\(")) as err:
        getattr(rs, case.primitive)(**case.bad)
    assert str(err.value).startswith(case.primitive + ": ")
    assert steps(rs) == before and rs.func.same_as(func)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_error_inside_is_wrapped_and_not_recorded(case, monkeypatch):
    rs = case.before(fresh(case.model))
    before, scheduled, script, plan = steps(rs), list(rs.scheduled), rs.script(), rs.plan
    owner, attribute, error = case.breaks

    def fail(*args, **kwargs):
        raise error("injected failure")
    monkeypatch.setattr(owner, attribute, fail)
    with pytest.raises(ct.ScheduleError, match=f"^{case.primitive}: .*injected failure") as err:
        getattr(rs, case.primitive)(*case.args)
    assert isinstance(err.value.__cause__, error)            # raise ... from the original
    assert steps(rs) == before and rs.scheduled == scheduled
    assert rs.script() == script and rs.plan == plan          # rolled back, not half applied


def test_schedule_error_prefixed_once():
    rs = fresh("TreeFC").specialize_leaves()
    with pytest.raises(ct.ScheduleError) as err:
        rs.pad_levels(0)                       # raised inside, already naming the primitive
    assert str(err.value) == "pad_levels: multiple must be a positive int, got 0"
    with pytest.raises(ct.ScheduleError) as err:
        rs.tile_gemm("nope")                   # raised by a helper that does not know the primitive
    assert str(err.value).startswith("tile_gemm: no block named 'nope'")
    with pytest.raises(ct.ScheduleError, match="^hoist re-lowers the program") as err:
        rs.fast_math().hoist()
    assert not str(err.value).startswith("hoist: ")


def test_plain_type_rules():
    """bool is not an int, an int is a fine float, `X | None` admits None."""
    class Toy:
        _applying = 0

        def __init__(self):
            self.recorded = []

        def _record(self, name, **args):
            self.recorded.append((name, args))

        def _snapshot(self):
            return None

        def _restore(self, saved):
            pass

        @primitive
        def knob(self, depth: int | None = None, scale: float = 1.0, flag: bool = False, label: str = "x"):
            """Toy primitive."""
            return self

    toy = Toy()
    toy.knob().knob(3, 2, True, "y").knob(None, 0.5)
    assert toy.recorded == [("knob", {"depth": None, "scale": 1.0, "flag": False, "label": "x"}),
                            ("knob", {"depth": 3, "scale": 2, "flag": True, "label": "y"}),
                            ("knob", {"depth": None, "scale": 0.5, "flag": False, "label": "x"})]
    for kwargs, message in [({"depth": True}, "'depth' must be int or None, got bool True"),
                            ({"depth": 2.0}, "'depth' must be int or None, got float"),
                            ({"scale": True}, "'scale' must be float, got bool"),
                            ({"scale": "1"}, "'scale' must be float, got str"),
                            ({"flag": 1}, "'flag' must be bool, got int 1"),
                            ({"label": None}, "'label' must be str, got NoneType")]:
        with pytest.raises(ct.ScheduleError, match=f"^knob: argument {message}"):
            toy.knob(**kwargs)
    assert len(toy.recorded) == 3 and toy._applying == 0


def test_docstring_and_signature_kept():
    for name in ("tile_gemm", "parallel_columns", "unroll_levels", "bind_nodes"):
        method = getattr(RecSchedule, name)
        assert method.__name__ == name and "Examples" in method.__doc__
    params = inspect.signature(RecSchedule.tile_gemm).parameters
    assert list(params) == ["self", "block", "node_tile", "column_tile", "lanes", "k_unroll"]
    assert params["node_tile"].default == 3
    assert inspect.signature(RecSchedule.persist) == inspect.signature(RecSchedule.parallel_columns)
    assert list(inspect.signature(RecSchedule.unroll_recursion).parameters) == ["self", "depth", "chunks"]


def test_replay_runs_only_primitives():
    for name in ("build", "finalize", "show", "scratchpads", "persist_nothing"):
        with pytest.raises(ct.ScheduleError, match=f"unknown primitive {name!r}"):
            fresh("TreeFC").replay([{"primitive": name}])


def test_a_primitive_failing_halfway_leaves_the_program_untouched(monkeypatch):
    """tile_gemm splits and reorders before it vectorizes: a failure there undoes the splits, so
    the next primitive (here the same one, once the fault is gone) sees the program as it was."""
    rs = fresh("TreeFC").specialize_leaves().pack("W", axis=0, tile=16)
    script = rs.script()
    real = tvm.s_tir.Schedule.vectorize

    def fail(*args, **kwargs):
        raise tvm.s_tir.ScheduleError("injected failure after the splits")
    monkeypatch.setattr(tvm.s_tir.Schedule, "vectorize", fail)
    with pytest.raises(ct.ScheduleError, match="injected failure"):
        rs.tile_gemm("internal_h_sum", node_tile=2, column_tile=16, lanes=8)
    assert rs.script() == script and not rs.tiled
    monkeypatch.setattr(tvm.s_tir.Schedule, "vectorize", real)
    rs.tile_gemm("internal_h_sum", node_tile=2, column_tile=16, lanes=8)
    assert rs.tiled == ["internal_h_sum"] and rs.script() != script
