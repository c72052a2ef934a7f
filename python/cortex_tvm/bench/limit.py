"""A batch's limit, level by level, next to what the kernel and a whole call take.

A level of n internal nodes streams the level GEMM's weight once per core's share (each
element feeds one FMA per node) and does n nodes' FLOPs, so it cannot take less than the
larger of

    weight bytes per core / that core's re-read bandwidth   (`peak.read_bandwidth`)
    n x FLOPs per node / cores / the FMA peak per core       (`peak.fma_peak`; x2 with vdpbf16ps)

plus one fork and join of the parallel region.  Summed over the batch's internal levels,
that is the limit `docs/benchmarks.md` holds a batch-1 time per level against.  The
kernel (`run(lin, check=False)`), and the whole call (linearizing included), are timed in
turn with `timing.in_turn`:

    python -m cortex_tvm.bench.limit --hidden 256 --batch 1 --precision fp32 bf16

prints a table and writes JSON lines (`--out`).  Leaves are table lookups (hoisted) and
cost no level; the models are the binary tree models of the zoo.
"""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass

import numpy as np

from .. import data
from ..target import bytes_of, cpu_info, make_target
from ..timing import in_turn
from .cases import make_model
from .common import batch_starts, cpu_model
from .peak import fma_peak, read_bandwidth

#: the models whose internal nodes all do the same work, two children each
MODELS = ("treelstm", "treefc", "treegru")
#: seconds one fork and join of TVM's parallel region costs (about 1 us on these 2-core VMs:
#: docs/benchmarks.md); the same for every level
FORK_JOIN_S = 1e-6


@dataclass(frozen=True)
class Machine:
    """What the limit divides by: per-core re-read bandwidth of the weight's share, and the
    FMA peak of all cores (fp32; bf16 with `vdpbf16ps` does twice the FLOPs per instruction)."""

    bandwidth: float        # bytes per second per core
    peak: float             # FLOPs per second, all cores
    cores: int


def node_flops(model) -> float:
    """FLOPs of one internal node: a two-leaf tree's, less its leaves'."""
    leaf = model.flops(model.linearize([data.Node(word=0)]))
    pair = model.flops(model.linearize([data.Node(children=[data.Node(word=0), data.Node(word=0)])]))
    return pair - 2 * leaf


def level_limit(nodes: int, flops_per_node: float, weight_bytes: float, machine: Machine,
                fork_join: float = FORK_JOIN_S) -> float:
    """Seconds a level of `nodes` internal nodes cannot go below (see the module docstring).
    E.g. 4 MB of weight on 2 cores at 100 GB/s each (20 us) against 1 node of 2 MFLOP at
    200 GFLOP/s (10 us): 21 us with the fork and join."""
    stream = weight_bytes / machine.cores / machine.bandwidth
    compute = nodes * flops_per_node / machine.peak
    return max(stream, compute) + fork_join


def batch_limit(level_sizes, flops_per_node: float, weight_bytes: float, machine: Machine,
                fork_join: float = FORK_JOIN_S) -> float:
    """The limit of a batch: its internal levels' limits, summed."""
    return sum(level_limit(int(n), flops_per_node, weight_bytes, machine, fork_join) for n in level_sizes)


def internal_level_sizes(lin) -> np.ndarray:
    """Internal nodes per level of a layout (level 0 holds the leaves)."""
    return np.diff(np.asarray(lin.level_offsets))[1:]


def measure(model_name: str, hidden: int, batch: int, precisions, batches: int = 10, rounds: int = 3,
            repeats: int = 10, log=sys.stderr) -> list:
    """One row per precision: the limit, the kernel's and the call's time, per batch and per level."""
    trees, vocab = data.sst_sample()
    picked = [trees[s:s + batch] for s in batch_starts(len(trees), batch, batches)]
    model = make_model(model_name, hidden, len(vocab))
    info = cpu_info(make_target("llvm"))
    per_node = node_flops(model)
    fp32_peak = fma_peak()["gflops"] * 1e9
    builds, rows = {}, []
    for precision in precisions:
        compiled = model.compile(precision=precision)
        bytes_per_element = bytes_of("bfloat16" if precision == "bf16" else "float32")
        weight_bytes = per_node / 2 * bytes_per_element
        # vdpbf16ps multiplies pairs: twice the fp32 FMA rate; storage-only bf16 computes in fp32
        fast_bf16 = precision == "bf16" and any(s.get("primitive") == "dot_bf16" for s in compiled.trace)
        machine = Machine(read_bandwidth(int(weight_bytes / info.cores))["gb_s_per_core"] * 1e9,
                          fp32_peak * (2 if fast_bf16 else 1), info.cores)
        layouts = {id(b): compiled.linearize(b) for b in picked}
        levels = [internal_level_sizes(model.linearize(b)) for b in picked]
        limit = float(np.mean([batch_limit(sizes, per_node, weight_bytes, machine) for sizes in levels]))
        builds[f"{precision} kernel"] = (lambda c, lay: lambda b: c.run(lay[id(b)], check=False))(compiled, layouts)
        builds[f"{precision} call"] = compiled
        rows.append({"model": model_name, "hidden": hidden, "batch": batch, "precision": precision,
                     "vdpbf16ps": fast_bf16, "levels": float(np.mean([len(s) for s in levels])),
                     "limit_ms": limit * 1e3, "machine": asdict(machine)})
        if log is not None:
            print(f"limit: {precision}: {machine.bandwidth / 1e9:.1f} GB/s per core for "
                  f"{weight_bytes / info.cores / 1e6:.2f} MB, peak {machine.peak / 1e9:.1f} GFLOP/s", file=log)
    times = {label: float(np.mean(t)) for label, t in in_turn(builds, picked, rounds, repeats).items()}
    for row in rows:
        row["kernel_ms"] = times[f"{row['precision']} kernel"] * 1e3
        row["call_ms"] = times[f"{row['precision']} call"] * 1e3
        row["kernel_vs_limit"] = row["kernel_ms"] / row["limit_ms"]
        row["cpu"] = cpu_model()
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cortex_tvm.bench.limit", description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", choices=MODELS, default="treelstm")
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--batch", type=int, default=1, help="trees per batch (default: %(default)s)")
    parser.add_argument("--precision", nargs="+", choices=("fp32", "bf16"), default=["fp32"])
    parser.add_argument("--batches", type=int, default=10, help="SST batches, spread over the file")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of timing in turn")
    parser.add_argument("--out", default=None, help="append the rows here as JSON lines")
    args = parser.parse_args(argv)
    rows = measure(args.model, args.hidden, args.batch, args.precision, args.batches, args.rounds)
    print(f"{args.model} H={args.hidden} batch {args.batch}, {rows[0]['levels']:.1f} internal levels "
          f"(SST, {args.batches} batches; {rows[0]['cpu']})")
    print(f"{'':6} {'limit':>9} {'kernel':>9} {'call':>9}  kernel/limit  per level: limit / kernel")
    for r in rows:
        print(f"{r['precision']:6} {r['limit_ms']:7.3f}ms {r['kernel_ms']:7.3f}ms {r['call_ms']:7.3f}ms  "
              f"{r['kernel_vs_limit']:10.2f}x   {r['limit_ms'] / r['levels'] * 1e3:.1f} / "
              f"{r['kernel_ms'] / r['levels'] * 1e3:.1f} us")
    if args.out:
        with open(args.out, "a", encoding="utf-8") as f:
            for r in rows:
                f.write(json.dumps(r, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
