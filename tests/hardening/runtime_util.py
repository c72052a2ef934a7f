"""The hidden size and the fresh-process runner shared by the test_runtime_*.py files."""
import os
import subprocess
import sys
import textwrap

H = 16


def run_python(script, env=None, timeout=180):
    """Run `script` (dedented) in a fresh Python; its stdout, or fail with its output's tail."""
    env = {**os.environ, **(env or {})}     # same TVM_NUM_THREADS: the "llvm" target records it
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], capture_output=True, text=True,
                          timeout=timeout, env=env)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    return proc.stdout
