"""Knobs of the derived schedule, set and not, timed alternately in one process (a benchmark
that prints, not a test): `python -m cortex_tvm.bench.knob_ab --knob persistent_threads=true`,
or several at once: `--knob node_tile=3 k_unroll=8`.

Both builds start from what `compile()` builds without a tuning log (the derived schedule at
its analytic point); the second sets the knobs.  Every batch of both is checked against the float64
reference first.  The figure is the mean over batches of each batch's best time over
`--rounds` rounds, the two builds alternating round by round (`common.alternate`).
"""
from __future__ import annotations

import argparse
import json
import sys

import numpy as np

from .. import data, recipes
from ..models import reference64
from ..policy.padding import padded_model
from ..target import host_llvm, make_target
from ..timing import batches_of
from .cases import MODEL_CLASSES, make_model, structures
from .common import alternate


def parse_knob(text: str) -> tuple:
    name, sep, value = text.partition("=")
    if not sep:
        raise argparse.ArgumentTypeError(f"--knob wants name=value, got {text!r}")
    try:
        return name, json.loads(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--knob {name}: {value!r} is not a JSON value (true, 2, ...)") from None


def builds(name, hidden, knobs, target, precision="fp32"):
    """(model, SST trees, {"default": the analytic point, "k=v,...": it with `knobs` set})."""
    trees, vocab = data.sst_sample()
    model = make_model(name, hidden, len(vocab))
    tgt = make_target(target)
    padded = padded_model(model, tgt)
    default = recipes.resolve(padded, tgt, None)      # what compile() builds without a log
    for knob, _ in knobs:
        if knob not in default.knobs:
            raise SystemExit(f"knob_ab: the derived schedule has no knob {knob!r}; it has {sorted(default.knobs)}")
    flipped = default.with_knobs(**dict(knobs))
    label = ",".join(f"{knob}={json.dumps(value)}" for knob, value in knobs)
    return model, trees, {"default": model.compile(target=tgt, schedule=default, precision=precision),
                          label: model.compile(target=tgt, schedule=flipped, precision=precision)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cortex_tvm.bench.knob_ab", description=__doc__.split("\n")[0])
    parser.add_argument("--models", nargs="+", default=["treelstm"], choices=sorted(MODEL_CLASSES))
    parser.add_argument("--hidden", nargs="+", type=int, default=[256],
                        help="hidden sizes (MV-RNN runs at most at 64, as in the bench; the line says the size run)")
    parser.add_argument("--batch", nargs="+", type=int, default=[1, 10])
    parser.add_argument("--knob", type=parse_knob, nargs="+", required=True,
                        help="name=value ..., e.g. persistent_threads=true, or node_tile=3 k_unroll=8")
    parser.add_argument("--batches", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--target", default="llvm")
    parser.add_argument("--mcpu", default=None, help="build for this LLVM CPU instead (haswell: AVX2 code)")
    parser.add_argument("--precision", default="fp32", choices=recipes.PRECISIONS)
    parser.add_argument("--mattr", nargs="+", default=None,
                        help="this CPU with LLVM attributes added, e.g. -avx512bf16: bf16 storage-only")
    args = parser.parse_args(argv)
    if args.mcpu is not None:
        args.target = {"kind": "llvm", "mcpu": args.mcpu}
    if args.mattr is not None:
        host = host_llvm()
        args.target = {**host, "mattr": list(host.get("mattr", [])) + args.mattr}
    for name in args.models:
        for hidden in args.hidden:
            model, trees, compiled = builds(name, hidden, args.knob, args.target, args.precision)
            for batch_size in args.batch:
                batches = [structures(name, b) for b in batches_of(trees, batch_size, args.batches)]
                want = [reference64(model, b) for b in batches]
                for label, c in compiled.items():
                    err = max(float(np.abs(c(b) - w).max()) for b, w in zip(batches, want))
                    if err > recipes.ROOT_TOLERANCE[args.precision]:
                        print(f"knob_ab: {label} is wrong on {name} H={model.hidden_size} (max |err| {err:.3g})",
                              file=sys.stderr)
                        return 1
                best = alternate(compiled, batches, args.rounds, args.repeats)
                base, other = best.values()
                what = "" if args.precision == "fp32" else f" {args.precision}"
                print(f"{name} H={model.hidden_size}{what} batch={batch_size}: " + ", ".join(
                      f"{label} {seconds * 1e3:.3f} ms" for label, seconds in best.items())
                      + f"  (default / knob: {base / other:.3f})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
