# In-process A/B of the training step: arm "new" (the weights' copies on cache lines, adjoint_copies.py) against
# arm "old" (the code before, restored while that arm's functions are built).  Run from the repo root as
#   python lines_ab.py BATCH lines [H [MCPU|- [MODEL]]]
# TreeLSTM x = 300, h = 150 by default (TreeFC x = h), as_torch(sparse=True) + ct.optim.Adagrad (DGL's groups),
# alternating rounds on 10 batches of BATCH SST trees; per round the median step of the 10 batches; printed: the
# median over rounds 3..14 per arm.
import os, sys, time, contextlib
os.environ.setdefault("TVM_NUM_THREADS", "2"); os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
import numpy as np, torch
import cortex_tvm as ct
from same_bits import old_code       # (this folder's: the code before, restored while built)
torch.set_num_threads(2)
B, which = int(sys.argv[1]), sys.argv[2]
H = int(sys.argv[3]) if len(sys.argv) > 3 else 150
mcpu = sys.argv[4] if len(sys.argv) > 4 and sys.argv[4] != "-" else None
name = sys.argv[5] if len(sys.argv) > 5 else "treelstm"

trees, vocab = ct.data.sst_sample()
import inspect
make = ct.models.BY_NAME[name]
width = {"embed_size": 300} if "embed_size" in inspect.signature(make).parameters else {}
arms = {}
for arm in ("new", "old"):
    model = make(hidden_size=H, vocab_size=len(vocab), seed=0, **width)
    with (old_code() if arm == "old" else contextlib.nullcontext()):
        compiled = model.compile(training=True, target={"kind": "llvm", "mcpu": mcpu} if mcpu else "llvm")
        for part in ("forward", "backward", "all"):
            compiled.adjoint.level_pass.function(part, True)
    module = compiled.as_torch(sparse=True)
    params = dict(module.named_parameters())
    rest = [v for k, v in params.items() if k != "emb"]
    opt = ct.optim.Adagrad([{"params": rest, "lr": 0.05, "weight_decay": 1e-4},
                            {"params": [params["emb"]], "lr": 0.005}], target=compiled.target)
    arms[arm] = (module, opt)
R = torch.from_numpy(np.random.default_rng(1).standard_normal((B, H)).astype(np.float32))
rng = np.random.default_rng(0)
batches = [[trees[i] for i in rng.permutation(len(trees))[:B]] for _ in range(10)]
# the same numbers first
outs = {}
for arm, (module, opt) in arms.items():
    opt.zero_grad(); out = module(batches[0]); (out * R).sum().backward()
    outs[arm] = (out.detach().numpy().copy(), {k: (p.grad.to_dense() if p.grad.is_sparse else p.grad).numpy().copy() for k, p in module.named_parameters()})
diff = max(float(np.abs(outs["new"][1][k] - outs["old"][1][k]).max()) for k in outs["new"][1])
print(f"same forward: {np.array_equal(outs['new'][0], outs['old'][0])}, max gradient difference {diff:.2e}")
steps = {arm: [] for arm in arms}
for round_ in range(14):
    for arm, (module, opt) in arms.items():
        times = []
        for batch in batches:
            opt.zero_grad()
            start = time.perf_counter()
            (module(batch) * R).sum().backward()
            opt.step()
            times.append(time.perf_counter() - start)
        if round_ >= 2:
            steps[arm].append(np.median(times))
for arm, values in steps.items():
    print(f"{name} h={H} {mcpu or 'this CPU'} B={B} {which}: {arm:4s} step {1e3 * np.median(values):.3f} ms "
          f"(rounds {1e3 * min(values):.3f}-{1e3 * max(values):.3f})")
n, o = np.median(steps["new"]), np.median(steps["old"])
print(f"  new vs old: {100 * (n - o) / o:+.1f}%")
