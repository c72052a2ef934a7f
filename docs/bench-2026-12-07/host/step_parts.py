# Where a training step's host time goes: TreeLSTM through as_torch(sparse=True) + ct.optim.Adagrad (DGL's groups),
# a step = zero_grad, the module's forward on B SST trees, (out * R).sum(), backward, opt.step; each part timed by a
# wrapper around it (inclusive), averaged over 400 steps after 30; the kernels timed around each call.
# From the repo root: B=1 H=16 X=16 PYTHONPATH=python python step_parts.py fp32|bf16   (B, H, X default 1, 16, 16)
import os, sys, time, collections
os.environ.setdefault("TVM_NUM_THREADS", "2"); os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import torch
from cortex_tvm import adjoint, adjoint_pass, runtime, optim, call_args
from step_setup import training_step
B = int(os.environ.get("B", 1)); H = int(os.environ.get("H", 16)); X = int(os.environ.get("X", 16))
setup = training_step("treelstm", B, H, X, sys.argv[1])
compiled, m, opt, R, batches = setup.compiled, setup.module, setup.opt, setup.R, setup.batches
lp = compiled.adjoint.level_pass
T = collections.defaultdict(float)
def wrap(owner, name, label=None):
    fn = getattr(owner, name); label = label or name
    def timed(*a, **k):
        t = time.perf_counter()
        try: return fn(*a, **k)
        finally: T[label] += time.perf_counter() - t
    setattr(owner, name, timed)
for key, fn in list(lp._functions.items()):
    def timed(*a, fn=fn, key=key):
        t = time.perf_counter(); r = fn(*a); T["kernel " + key[0]] += time.perf_counter() - t; return r
    lp._functions[key] = timed
RF = [c for c in torch.autograd.Function.__subclasses__() if c.__name__ == "RecursiveFunction"][0]
wrap(RF, "backward", "RF.backward"); wrap(RF, "forward", "RF.forward")
wrap(call_args.Pullback, "__call__", "pullback")
wrap(adjoint.Adjoint, "vjp", "Adjoint.vjp"); wrap(adjoint.Adjoint, "forward", "Adjoint.forward")
wrap(adjoint_pass.LevelPass, "__call__", "LevelPass.__call__")
wrap(type(m), "_sync")
wrap(runtime.CompiledModel, "vjp", "CompiledModel.vjp")
dense, rows = optim._kernels(opt._target)
def tk(fn):
    def f(*a):
        t = time.perf_counter(); fn(*a); T["adagrad kernels"] += time.perf_counter() - t
    return f
optim._BUILT[opt._target] = (tk(dense), tk(rows))
N = 400
for i in range(N + 30):
    if i == 30: T.clear()
    t0 = time.perf_counter(); opt.zero_grad(); t1 = time.perf_counter()
    out = m(batches[i % 10]); t2 = time.perf_counter()
    loss = (out * R).sum(); t3 = time.perf_counter()
    loss.backward(); t4 = time.perf_counter()
    opt.step(); t5 = time.perf_counter()
    for k, v in (("Z zero_grad", t1 - t0), ("Z module fwd", t2 - t1), ("Z loss", t3 - t2), ("Z backward", t4 - t3), ("Z opt.step", t5 - t4), ("Z step", t5 - t0)): T[k] += v
for k in sorted(T): print("%-22s %8.1f us" % (k, 1e6 * T[k] / N))
