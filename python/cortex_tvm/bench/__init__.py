"""`cortex-tvm bench`: cortex_tvm next to numpy, PyTorch and DGL on the same trees, weights and threads.

Every system runs in a process of its own (thread pools of different runtimes
spin against each other in one process), systems alternate round by round,
and each system's best round is reported.  Every batch of every system is
checked against a float64 per-node reference (`models.reference64`); a wrong
one fails the command.  See `run` for the orchestrator, `check` for the
correctness check, `worker` for the cortex_tvm / numpy / sgemm workers and
`torch_worker.py` (a standalone script, no cortex_tvm import) for the PyTorch
and DGL baselines.

`--train` times one training step per batch instead (forward, loss = sum(roots * R) for a
fixed seeded R, backward to the gradients of every weight): cortex_tvm's
compile(training=True) `vjp` against PyTorch autograd through the same forward functions,
TreeLSTM and TreeFC only.  Each batch's roots and the gradient of U (TreeLSTM) / W (TreeFC)
are checked against float64 PyTorch autograd through an eager per-node recursion.
"""
from __future__ import annotations

import os

MODELS = ("treelstm", "treefc", "treegru", "childsum", "mvrnn", "dagrnn", "seqlstm", "seqgru")
DEFAULT_MODELS = ("treelstm", "treefc")
SYSTEMS = ("cortex_tvm", "numpy", "torch-eager", "torch-levels", "dgl")
TORCH_SYSTEMS = ("torch-eager", "torch-levels", "dgl", "torch-levels-bf16")
#: `--precision bf16` adds, beside each of these systems, the same one in bfloat16: ours with
#: compile(precision="bf16"), PyTorch by height under torch.autocast("cpu", dtype=torch.bfloat16)
BF16_SYSTEMS = {"cortex_tvm": "cortex_tvm-bf16", "torch-levels": "torch-levels-bf16"}
#: `--train`: the systems with a training step, and the models it is timed for
TRAIN_SYSTEMS = ("cortex_tvm", "torch-eager", "torch-levels", "dgl", "cortex_tvm-bf16", "torch-levels-bf16")
TRAIN_MODELS = ("treelstm", "treefc")


def add_parser(subparsers):
    """Register the `bench` subcommand on the CLI's subparsers.  The command itself is `run.bench`,
    which `cli.COMMANDS` names and `cli.main` imports once `bench` is chosen: this module, read to
    build the parser (`cortex-tvm --help`), must not import TVM, and `run` does at its top."""
    p = subparsers.add_parser(
        "bench", help="latency of cortex_tvm vs numpy, PyTorch and DGL (each in its own process)",
        description=__doc__)
    p.add_argument("--models", nargs="+", default=list(DEFAULT_MODELS), choices=MODELS,
                   help="default: treelstm treefc (the ones with PyTorch/DGL baselines)")
    p.add_argument("--hidden", nargs="+", type=int, default=[256], help="hidden sizes (default: %(default)s)")
    p.add_argument("--batch", nargs="+", type=int, default=[1, 10, 64],
                   help="trees per batch, one case each (default: %(default)s)")
    p.add_argument("--batches", type=int, default=10, help="fixed batches per batch size, spread over the trees")
    p.add_argument("--repeats", type=int, default=10, help="timed runs per batch (the minimum counts)")
    p.add_argument("--rounds", type=int, default=2, help="each system's best round is reported")
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="threads of every runtime")
    p.add_argument("--systems", nargs="+", default=list(SYSTEMS), choices=SYSTEMS,
                   help="what to time (default: all; a missing one is reported as not installed)")
    p.add_argument("--precision", choices=("fp32", "bf16"), default="fp32",
                   help="bf16: also time cortex_tvm and torch-levels with bfloat16 weights (rows "
                        "cortex_tvm-bf16, torch-levels-bf16, checked at a 1e-2 tolerance); with --train, "
                        "compile(training=True, precision='bf16') (products on bfloat16 inputs, AVX512_BF16) "
                        "and PyTorch's step under torch.autocast('cpu', dtype=torch.bfloat16), gradients "
                        "checked at 3e-2")
    p.add_argument("--train", action="store_true",
                   help="time one training step per batch instead of inference: forward, loss = "
                        "sum(roots * R) for a fixed seeded R, backward to every weight's gradient, "
                        "the optimizer's step (--optimizer) "
                        "(cortex_tvm: compile(training=True).as_torch(), or .vjp with --optimizer none; "
                        "PyTorch: autograd through the same "
                        "forward); treelstm and treefc, systems cortex_tvm, torch-eager, torch-levels, "
                        "dgl; roots and the gradient of U (treelstm) / W (treefc) are checked against "
                        "float64 PyTorch autograd")
    p.add_argument("--optimizer", default="adagrad",
                   choices=("adagrad", "adagrad-sparse", "adagrad-ours", "adagrad-sparse-ours", "none"),
                   help="--train: the optimizer step each timed training step ends in, torch.optim.Adagrad on "
                        "every side (cortex_tvm through as_torch(); DGL's TreeLSTM recipe: lr 0.05, weight decay "
                        "1e-4, the embedding at lr 0.005 without decay; needs torch); adagrad-sparse: the same with "
                        "the embedding's gradient a sparse tensor of the batch's rows on every side "
                        "(F.embedding(sparse=True), as_torch(sparse=True)), so the step updates those rows only; "
                        "-ours: the same, but cortex_tvm steps with its own cortex_tvm.optim.Adagrad (the same "
                        "update, compiled), the baselines with torch.optim.Adagrad; "
                        "none: forward + backward only (cortex_tvm through vjp)")
    p.add_argument("--features", type=int, default=None, metavar="F",
                   help="feed every node F seeded float32 features instead of a word id (models built with "
                        "inputs='features', the features passed per call; the PyTorch baselines gather the "
                        "same rows), e.g. 768 for contextual token embeddings; inference only")
    p.add_argument("--embed", type=int, default=None, metavar="X",
                   help="word-vector width x of the models with an input projection (treelstm, treegru, "
                        "childsum, seqlstm, seqgru, dagrnn; default: x = H), e.g. --hidden 150 --embed 300, "
                        "the SST recipe of Tai et al. and DGL's example")
    p.add_argument("--torch-python", default=None,
                   help="a Python with torch (+dgl) for the torch systems (default: this one, if it has torch)")
    p.add_argument("--mcpu", default=None,
                   help="LLVM CPU to compile cortex_tvm for (e.g. haswell: AVX2 code, runnable on an "
                        "AVX-512 host); default: this machine's CPU")
    p.add_argument("--out", default=None, help="JSON results (default bench-<date>.json)")
    p.add_argument("--timeout", type=float, default=900, help="seconds before a worker is killed")
    p.add_argument("--quick", action="store_true",
                   help="smoke test: first model only, H=64, batch 10, 3 batches, 3 repeats, 1 round")
    return p
