# One process: TreeLSTM x = 300, h = 150 through as_torch(sparse=True) and DGL's Adagrad groups, each
# part of a step timed: the module's forward and, inside it, the compiled training forward (the
# level pass's "forward" part); loss.backward() and, inside it, the level pass's "backward" part;
# the optimizer's step.  Median per step over the last 30 of 40 steps (4 rounds over 10 batches of B
# trees, argv[1]); OPT=ct: cortex_tvm.optim.Adagrad, else torch.optim.Adagrad.  Run from the repo root.
import collections, functools, os, sys, time
os.environ.setdefault("TVM_NUM_THREADS", "2"); os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
import numpy as np, torch
import cortex_tvm as ct
from cortex_tvm import adjoint_pass
torch.set_num_threads(2)
times = collections.defaultdict(list)
call = adjoint_pass.LevelPass.__call__


@functools.wraps(call)
def timed_call(self, *args, **kwargs):
    start = time.perf_counter()
    result = call(self, *args, **kwargs)
    times["  of it the level pass, " + kwargs.get("part", "all")].append(time.perf_counter() - start)
    return result


adjoint_pass.LevelPass.__call__ = timed_call
trees, vocab = ct.data.sst_sample()
B = int(sys.argv[1])
model = ct.models.TreeLSTM(hidden_size=150, embed_size=300, vocab_size=len(vocab), seed=0)
module = model.compile(training=True).as_torch(sparse=True)
params = dict(module.named_parameters())
Adagrad = ct.optim.Adagrad if os.environ.get("OPT") == "ct" else torch.optim.Adagrad
optimizer = Adagrad([{"params": [v for k, v in params.items() if k != "emb"], "lr": 0.05, "weight_decay": 1e-4},
                     {"params": [params["emb"]], "lr": 0.005}])
R = torch.from_numpy(np.random.default_rng(1).standard_normal((B, 150)).astype(np.float32))
rng = np.random.default_rng(0)
batches = [[trees[i] for i in rng.permutation(len(trees))[:B]] for _ in range(10)]
for _ in range(4):
    for batch in batches:
        optimizer.zero_grad()
        t0 = time.perf_counter(); out = module(batch); t1 = time.perf_counter()
        (out * R).sum().backward(); t2 = time.perf_counter(); optimizer.step(); t3 = time.perf_counter()
        times["module forward"].append(t1 - t0); times["loss.backward()"].append(t2 - t1)
        times["optimizer step"].append(t3 - t2); times["the step"].append(t3 - t0)
print(f"B={B} {Adagrad.__module__}.Adagrad")
for name in ("module forward", "  of it the level pass, forward", "loss.backward()", "  of it the level pass, backward",
             "optimizer step", "the step"):
    print(f"  {name:34s} {1e3 * np.median(times[name][-30:]):.3f} ms")
