"""Measuring tuning points on another machine through TVM's RPC (tracker + servers).

The user's workstation schedules and builds for the device's target, exports
a shared library, and a server registered at the tracker under `key`
uploads it, loads it and times the kernel with TVM's `time_evaluator` on
the device.  The host-side part of a call (linearization) is timed where the
tuner runs.  As with local measurement, a failure is a data point (inf),
never fatal.

    python -m tvm.exec.rpc_tracker --host 0.0.0.0 --port 9190            # anywhere
    python -m tvm.exec.rpc_server --tracker HOST:9190 --key arm-board     # on the device
    tune.tune(model, trials=32, log="arm.jsonl", target=arm_target, rpc=("HOST", 9190, "arm-board"))
"""
from __future__ import annotations

import os
import tempfile
import time
import traceback
from dataclasses import dataclass

import numpy as np

import tvm

from .. import build
from ..compile_cache import compile_module
from ..kernel_args import kernel_weights, model_weight_arrays
from ..policy.padding import padded_model
from ..plan import kernel_names
from ..target import make_target
from ..timing import best_of
from .measure import MeasureResult, Measurer, invalid, retime_by_measuring


@dataclass
class RPCMeasurer(Measurer):
    """A Measurer whose kernels run on an RPC server found through a tracker."""

    tracker_host: str = "127.0.0.1"
    tracker_port: int = 9190
    key: str = "cortex"
    session_timeout: float = 120.0
    cc: str | None = None          # compiler for export_library (a cross compiler for another ISA)

    connect_timeout: float = 5.0

    def session(self):
        import socket

        from tvm import rpc
        try:        # TVM's own client retries for a minute; say at once that nothing listens
            socket.create_connection((self.tracker_host, self.tracker_port), self.connect_timeout).close()
        except OSError as err:
            raise ConnectionError(f"no RPC tracker at {self.tracker_host}:{self.tracker_port}: {err}") from None
        return rpc.connect_tracker(self.tracker_host, self.tracker_port).request(
            self.key, session_timeout=self.session_timeout)

    def retime(self, space, points, rounds: int) -> dict:
        """Overrides `Measurer.retime`, which would build and run on this host: each round
        builds, uploads and times every point on the device again."""
        return retime_by_measuring(self, space, points, rounds)

    def measure(self, space, point) -> MeasureResult:
        start = time.perf_counter()
        try:
            if space.check(point) is not None:
                return invalid(space, point)
            target = make_target(self.target)
            padded = padded_model(self.model, target)      # sizes padded as compile() does
            rs, recipe = build.schedule_model(padded, target, space.recipe_for(point))
            if rs.plan.per_level:
                return MeasureResult(error="invalid: remote measurement times one kernel call "
                                           "(per_level_kernels is not supported)")
            executable = compile_module(rs.finalize().module(), target, rs.plan.pass_config())   # linked below
            build_s = time.perf_counter() - start
            with tempfile.TemporaryDirectory() as tmp:
                path = os.path.join(tmp, "kernel.so")
                executable.export_library(path, **({"cc": self.cc} if self.cc else {}))
                remote = self.session()
                remote.upload(path)
                module = remote.load_module("kernel.so")
            device = remote.cpu(0)

            def put(a):
                return tvm.runtime.tensor(np.ascontiguousarray(a), device)
            signature = rs.signature
            # the parameter transforms run on the remote device, as a load there would run them
            weights = kernel_weights(module, signature, model_weight_arrays(padded, signature), put)
            states = signature.states

            def lay_out(b):
                return signature.layout(b, rs.plan.node_tile, rs.plan.dynamic_batching, padded.vocab_bound,
                                        rs.plan.unroll)      # recursive unrolling lays out its own levels
            name = kernel_names(rs.plan)[0]
            times = []
            for i, batch in enumerate(self.batches):
                lin = lay_out(batch)
                _, shape, dtype = states[0]
                out = put(np.zeros((len(lin.roots),) + shape, dtype))
                args = signature.structure_args(lin, put) + weights + [
                    put(np.zeros((lin.num_slots,) + s, d)) for _, s, d in states] + [out]
                module[name](*args)       # every batch checked before it is timed
                wrong = self.wrong_numbers(i, out.numpy(), "bf16" if rs.plan.bf16_weights else "fp32")
                if wrong:
                    return MeasureResult(error=f"{wrong} (on the remote device)", build_s=build_s)
                timer = module.time_evaluator(name, device, number=1, repeat=self.repeats)
                kernel = min(timer(*args).results)
                host = best_of(lay_out, batch,
                               self.repeats)
                times.append(kernel + host)
            return MeasureResult(tuple(times), None, build_s)
        except Exception as err:        # a failed build, upload or run is a data point, not a crash
            last = traceback.format_exception_only(type(err), err)[-1].strip()
            return MeasureResult(error=last[:2000], build_s=time.perf_counter() - start)
