import os, sys
from cortex_tvm import adjoint_weights, adjoint_kernel
if os.environ.get("NOWEIGHTS"):
    adjoint_kernel.emit_weight_read = lambda *a, **k: None
exec(open("/tmp/p/probe.py").read())
