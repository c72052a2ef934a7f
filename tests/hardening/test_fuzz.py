"""Fuzz suites (hypothesis), each in a process of its own, so that a signal fails the test with
the case that caused it instead of taking pytest down: hand-edited `Linearized` arrays through
`run()` (tests/hardening/fuzz_run.py) and altered exports through `ct.load`
(tests/hardening/fuzz_load.py). The only outcomes allowed are a ValueError/TypeError, or an
answer equal to an independent computation.

10,000 and 2,000 cases, about 30 s and 15 s on 2 cores.
"""
import json
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))


def _run_worker(script, args, progress):
    proc = subprocess.run([sys.executable, os.path.join(HERE, script), *map(str, args)],
                          capture_output=True, text=True, timeout=1800, env=dict(os.environ))
    lines = progress.read_text().splitlines() if progress.exists() else []
    assert proc.returncode == 0, (f"{script} ended with {proc.returncode} (a negative value is the signal); "
                                  f"last case begun: {lines[-1:]}\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("cases", [10_000])
def test_hand_edited_layouts_through_run(tmp_path, cases):
    progress = tmp_path / "progress.jsonl"
    summary = _run_worker("fuzz_run.py", [cases, progress], progress)
    assert summary["cases"] >= cases and summary["wrong"] == 0 and summary["disagree"] == 0, summary
    assert summary["compared"] > cases // 3, summary
    assert summary["refused"] > cases // 4 and summary["accepted"] > cases // 20, summary   # both exercised


@pytest.mark.parametrize("cases", [2_000])
def test_altered_exports_through_load(tmp_path, cases):
    progress = tmp_path / "progress.jsonl"
    summary = _run_worker("fuzz_load.py", [cases, tmp_path, progress], progress)
    assert summary["cases"] >= cases and summary["wrong"] == 0, summary
    assert summary["refused"] > cases // 2, summary
