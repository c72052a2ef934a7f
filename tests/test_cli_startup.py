"""`cortex-tvm --help` and `import cortex_tvm` import no TVM (3-5 s here): the parser and the
numpy-only package root are all they need; the commands import the compiler when they run."""
import subprocess
import sys

SCRIPT = """
import sys, time
start = time.perf_counter()
import cortex_tvm.cli as cli
try:
    cli.main(["--help"])
except SystemExit as done:
    assert done.code == 0, done.code
for command in ("demo", "show", "bench", "tune"):
    try:
        cli.main([command, "--help"])
    except SystemExit as done:
        assert done.code == 0, (command, done.code)
print("heavy:", sorted(m for m in ("tvm", "torch", "xgboost", "cortex_tvm.runtime", "cortex_tvm.schedule")
                       if m in sys.modules))
"""


def test_help_imports_no_tvm():
    proc = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "usage: cortex-tvm" in proc.stdout and "heavy: []" in proc.stdout, proc.stdout[-500:]


def test_package_root_is_light_and_the_deploy_side_comes_on_first_use():
    code = ("import sys, cortex_tvm as ct; assert 'tvm' not in sys.modules; "
            "ct.load; assert 'tvm' in sys.modules and 'cortex_tvm.schedule' not in sys.modules; print('ok')")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "ok" in proc.stdout, proc.stderr


def test_the_cli_model_names_are_the_zoo():
    """bench.MODELS (read by the CLI without importing the models) names exactly models.BY_NAME."""
    import cortex_tvm as ct
    from cortex_tvm.bench import MODELS
    assert sorted(MODELS) == sorted(ct.models.BY_NAME)


def test_the_command_table_names_every_command_and_each_resolves():
    """cli.COMMANDS (what `main` imports once a command is chosen) has one runnable entry per
    subcommand of the parser, and no more."""
    import argparse

    from cortex_tvm import cli
    (sub,) = [a for a in cli.make_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    assert sorted(sub.choices) == sorted(cli.COMMANDS)
    for command in cli.COMMANDS:
        assert callable(cli.command_function(command)), command
