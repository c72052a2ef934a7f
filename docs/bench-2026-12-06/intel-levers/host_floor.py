# Where a training step's time goes at batch argv[1] (TreeLSTM x = 300, h = 150, as_torch(sparse=True) +
# ct.optim.Adagrad with DGL's groups, 10 SST batches, argv[2] "same": the first batch every time): each wrapped
# function's inclusive time per step, median of the last 20 steps.  NOOP=1: from the third round on the level pass
# is skipped (its kernels do not run; the host's work alone, its caches warm; the pullback then finds no gradient
# and `vjp` zeroes a U- and W-sized array for each, about 0.1-0.2 ms not in a real step).  TWICE=1: optimizer.step()
# a second time right after the first, timed on its own ("opt step again").
import os, sys, time, functools, collections
os.environ.setdefault("TVM_NUM_THREADS", "2"); os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
import numpy as np, torch
import cortex_tvm as ct
from cortex_tvm import adjoint, adjoint_pass, runtime, torch_interop, weights as W, optim, adjoint_numpy
torch.set_num_threads(2)
times = collections.defaultdict(list)
def wrap(owner, name, label):
    f = getattr(owner, name)
    @functools.wraps(f)
    def g(*a, **k):
        t = time.perf_counter(); r = f(*a, **k); times[label].append(time.perf_counter() - t); return r
    setattr(owner, name, g)
trees, vocab = ct.data.sst_sample()
B = int(sys.argv[1])
model = ct.models.TreeLSTM(hidden_size=150, embed_size=300, vocab_size=len(vocab), seed=0)
compiled = model.compile(training=True)
module = compiled.as_torch(sparse=True)
cls = type(module)
wrap(cls, "_sync", "sync(load_weights)")
wrap(adjoint.Adjoint, "linearize", "linearize") if hasattr(adjoint.Adjoint, "linearize") else None
A = adjoint.Adjoint
for n in ("layout", "word_rows", "forward", "_levels", "vjp", "state_adjoints"):
    wrap(A, n, "Adjoint." + n)
wrap(adjoint_pass.LevelPass, "__call__", "LevelPass.__call__")
wrap(adjoint_numpy.Level, "backward", "Level.backward")
wrap(runtime.CompiledModel, "vjp", "CompiledModel.vjp")
params = dict(module.named_parameters())
optimizer = ct.optim.Adagrad([{"params": [v for k, v in params.items() if k != "emb"], "lr": 0.05, "weight_decay": 1e-4},
                     {"params": [params["emb"]], "lr": 0.005}])
R = torch.from_numpy(np.random.default_rng(1).standard_normal((B, 150)).astype(np.float32))
rng = np.random.default_rng(0)
batches = [[trees[i] for i in rng.permutation(len(trees))[:B]] for _ in range(10)]
same = len(sys.argv) > 2
noop = os.environ.get("NOOP")
twice = os.environ.get("TWICE")
for rnd in range(6):
    if noop and rnd == 2:
        adjoint_pass.LevelPass.__call__ = lambda self, *a, **k: [] if k.get("part") != "forward" else None
    for batch in batches:
        if same: batch = batches[0]
        t0 = time.perf_counter()
        optimizer.zero_grad()
        out = module(batch); t1 = time.perf_counter()
        (out * R).sum().backward(); t2 = time.perf_counter()
        optimizer.step(); t3 = time.perf_counter()
        if twice:                       # a second step right after, timed on its own (caches warm from the first)
            optimizer.step(); times["opt step again"].append(time.perf_counter() - t3)
        times["module forward"].append(t1 - t0); times["backward()"].append(t2 - t1); times["opt step"].append(t3 - t2); times["step"].append(t3-t0)
steps = len(times["step"])
for k, v in times.items():
    per = len(v) // steps
    if per == 0: continue
    v = np.array(v[-20 * per:]).reshape(20, per).sum(1)
    print(f"{k:28s} x{per}  {1e3*np.median(v):.3f} ms")
