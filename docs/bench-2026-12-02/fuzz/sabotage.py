"""Can the run() fuzz fail?  Both checks lose the node-tile rule (the compiled check is bypassed,
check_bounds gets node_tile=1), then 600 cases run: truncated levels must show as wrong answers.
    python docs/bench-2026-12-02/fuzz/sabotage.py 600
"""
import sys

sys.path.insert(0, "tests/hardening")
import cortex_tvm.linearize as L  # noqa: E402
from cortex_tvm.runtime import CompiledModel  # noqa: E402

original = L.check_bounds


def without_node_tile(lin, *args, **kwargs):
    kwargs.pop("node_tile", None)
    return original(lin, *args, **kwargs)


L.check_bounds = without_node_tile
CompiledModel.compiled_check_status = lambda self, lin: None
import fuzz_run  # noqa: E402

fuzz_run.main(int(sys.argv[1]), "/tmp/sabotage-progress.jsonl")
