# The training pass's two functions (TreeLSTM x = 300, h = 150) built apart: TVM's compile and, with "jit", the machine
# code TVM's JIT makes at the first lookup of the function; the two one after the other and on two threads at once.
# Run from the repo root with PYTHONPATH=python. Its output, copied from the terminal of the session that ran it (this
# Zen 4 VM, 2026-12-07 ~03:52 UTC, before the level pass used the build cache), is split_probe.txt.
import time, threading
import tvm
import cortex_tvm as ct
from cortex_tvm import tir_pipeline
trees, vocab = ct.data.sst_sample()
model = ct.models.TreeLSTM(hidden_size=150, embed_size=300, vocab_size=len(vocab), seed=0)
c = model.compile(training=True)
lp = c.adjoint.level_pass
f, _ = lp.build("forward", True); b, _ = lp.build("backward", True)
res = {}
def go(name, fn, jit):
    t = time.perf_counter(); e = tvm.compile(tvm.IRModule({name: fn}), target=lp.target, tir_pipeline=tir_pipeline.NAME); t1 = time.perf_counter()
    if jit: e[str(fn.attrs["global_symbol"])]
    res[name] = (round(t1 - t, 2), round(time.perf_counter() - t1, 2))
for jit in (False, True):
    for par in (False, True):
        t = time.perf_counter()
        th = [threading.Thread(target=go, args=(n + str(jit) + str(par), fn, jit)) for n, fn in (("fwd", f), ("bwd", b))]
        if par:
            [x.start() for x in th]; [x.join() for x in th]
        else:
            for x in th: x.start(); x.join()
        print("jit", jit, "parallel", par, "%.2f" % (time.perf_counter() - t), {k: v for k, v in res.items() if k.endswith(str(jit) + str(par))}, flush=True)
