"""The `cortex-tvm` command line: the parser, and a table of the commands' modules.

Plugin-style dispatch: building the parser, and so `cortex-tvm --help`, must import no TVM (3-5 s;
tests/test_cli_startup.py), while each command's module imports the compiler at its top (no package
module imports another inside a function).  So this module imports no command module: `COMMANDS`
names each command's `module:function`, and `main` imports the one module the command line chose
(`importlib.import_module`) and calls its function with the parsed arguments.  The commands are in
`commands/` (`demo.py`, `show.py`, `tune.py`); `bench` is `bench/run.py`'s `bench`.
"""
from __future__ import annotations

import argparse
import importlib
import sys

from . import config
from .bench import MODELS
from .bench import add_parser as add_bench_parser
from .commands import DEFAULT_HIDDEN, UsageError
# re-exported: `cortex_tvm.cli.user_model` and `MODEL_METHODS` predate `commands/` (both light)
from .commands.user_model import MODEL_METHODS, user_model

__all__ = ["COMMANDS", "DEFAULT_HIDDEN", "MODEL_METHODS", "UsageError", "main", "user_model"]

#: the `--help` description (kept apart from the module docstring, which says how this works)
DESCRIPTION = "The `cortex-tvm` command: demo, show, bench, tune."
#: command -> "module:function" run with the parsed arguments, returning the exit status
COMMANDS = {
    "demo": "cortex_tvm.commands.demo:run",
    "show": "cortex_tvm.commands.show:run",
    "bench": "cortex_tvm.bench.run:bench",
    "tune": "cortex_tvm.commands.tune:run",
}
_MODEL_HELP = f"a zoo model ({', '.join(MODELS)}) or MODULE:NAME, a model in a module or .py file " \
              "(or a function returning one)"


def _add_demo_parser(subparsers) -> None:
    p = subparsers.add_parser("demo", help="compile TreeLSTM and run it on the bundled SST trees next to numpy")
    p.add_argument("--hidden", type=int, default=256, help="hidden size (default: %(default)s)")
    p.add_argument("--batch", type=int, default=10, help="trees per batch (default: %(default)s)")
    p.add_argument("--max-batches", type=int, default=None, help="use only the first N batches")
    p.add_argument("--repeats", type=int, default=5,
                   help="timed runs per batch, the best counts (default: %(default)s)")
    p.add_argument("--trees", default=None, help="a PTB-bracket file instead of the bundled SST sample")


def _add_show_parser(subparsers) -> None:
    p = subparsers.add_parser("show", help="print the TIR after each primitive of a schedule recipe")
    p.add_argument("model", help=_MODEL_HELP)
    p.add_argument("--hidden", type=int, default=None,
                   help=f"hidden size of a zoo model (default: {DEFAULT_HIDDEN['show']})")
    p.add_argument("--vocab", type=int, default=100, help="vocabulary size (default: %(default)s)")
    p.add_argument("--schedule", default=None, help="recipe name or .json path (default: the model's)")
    p.add_argument("--target", default="llvm", help="TVM target: llvm or cuda (default: %(default)s)")
    p.add_argument("--full", action="store_true", help="print the whole TIR after each step, not a diff")


def _add_tune_parser(subparsers) -> None:
    p = subparsers.add_parser("tune", help="search a model's schedule knobs; trials go to a JSON-lines log")
    p.add_argument("model", help=_MODEL_HELP)
    p.add_argument("--trials", type=int, default=32, help="trials in all (ones already in the log count)")
    p.add_argument("--log", default="tuning.jsonl", help="JSON-lines tuning log (appended to; resumed)")
    p.add_argument("--trees", default=None, help="a PTB-bracket file to time on (default: bundled SST sample)")
    p.add_argument("--hidden", type=int, default=None,
                   help=f"hidden size of a zoo model (default: {DEFAULT_HIDDEN['tune']})")
    p.add_argument("--vocab", type=int, default=None,
                   help="vocabulary size of a zoo model (default: the trees' vocabulary)")
    p.add_argument("--batch", type=int, default=10, help="trees per timed batch (default: %(default)s)")
    p.add_argument("--seconds", type=float, default=None, help="stop after this many seconds")
    p.add_argument("--target", default="llvm", help="TVM target kind (default: %(default)s, this CPU)")
    p.add_argument("--mcpu", default=None, help="LLVM CPU to tune for (e.g. haswell: AVX2 code)")
    p.add_argument("--repeats", type=int, default=5, help="timed runs per batch (the best counts)")
    p.add_argument("--seed", type=int, default=0, help="random seed of the search (default: %(default)s)")
    p.add_argument("--precision", choices=("fp32", "bf16"), default="fp32",
                   help="tune the bf16 build (compile(precision='bf16')); records are keyed by it")


def make_parser() -> argparse.ArgumentParser:
    """The `cortex-tvm` parser, every command's subparser on it (imports no command module)."""
    parser = argparse.ArgumentParser(prog="cortex-tvm", description=DESCRIPTION)
    sub = parser.add_subparsers(dest="command", required=True)
    _add_demo_parser(sub)
    _add_show_parser(sub)
    add_bench_parser(sub)
    _add_tune_parser(sub)
    return parser


def command_function(command: str):
    """The function that runs `command`: its module is imported now, not before (see above)."""
    module_name, _, function = COMMANDS[command].partition(":")
    return getattr(importlib.import_module(module_name), function)


def main(argv=None) -> int:
    """Run `cortex-tvm` on `argv` (default: sys.argv[1:]); the command's exit status, 2 on a
    bad command line."""
    args = make_parser().parse_args(argv)
    config.use_all_cores()
    try:
        return command_function(args.command)(args)
    except UsageError as err:
        print(f"{args.command}: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
