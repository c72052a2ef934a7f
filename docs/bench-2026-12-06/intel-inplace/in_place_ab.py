# One process, TreeLSTM x = 300, h = 150 (argv[2] model, argv[3] h, argv[4] an LLVM CPU: haswell for
# AVX2 code) through as_torch(sparse=True), DGL's Adagrad groups with
# cortex_tvm.optim.Adagrad: the training step with the weight sums written into their gradients
# (LevelPass.in_place, the default since 2026-12-06) against summed apart, zeroed gradients and an add
# (in_place emptied), alternating by round on the same 10 batches of argv[1] SST trees.  Per step: the
# median of each round's 10 batches; printed: the median over 12 rounds
# of each arm (14 run, the first 2 left out).  Run from the repo root.
import inspect, os, sys, time
os.environ.setdefault("TVM_NUM_THREADS", "2"); os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
import numpy as np, torch
import cortex_tvm as ct
torch.set_num_threads(2)
trees, vocab = ct.data.sst_sample()
B = int(sys.argv[1])
name, H = (sys.argv[2], int(sys.argv[3])) if len(sys.argv) > 3 else ("treelstm", 150)
mcpu = sys.argv[4] if len(sys.argv) > 4 else None
make = ct.models.BY_NAME[name]
width = {"embed_size": 300} if "embed_size" in inspect.signature(make).parameters else {}     # (TreeFC: x = h)
model = make(hidden_size=H, vocab_size=len(vocab), seed=0, **width)
compiled = model.compile(training=True, target={"kind": "llvm", "mcpu": mcpu} if mcpu else "llvm")
module = compiled.as_torch(sparse=True)
level_pass = module.compiled.adjoint.level_pass
arms = {"in place": level_pass.in_place, "summed apart": frozenset()}
params = dict(module.named_parameters())
rest = [v for k, v in params.items() if k != "emb"]
optimizer = ct.optim.Adagrad([{"params": rest, "lr": 0.05, "weight_decay": 1e-4},
                              {"params": [params["emb"]], "lr": 0.005}], target=compiled.target)
R = torch.from_numpy(np.random.default_rng(1).standard_normal((B, H)).astype(np.float32))
rng = np.random.default_rng(0)
batches = [[trees[i] for i in rng.permutation(len(trees))[:B]] for _ in range(10)]
steps = {arm: [] for arm in arms}
for round_ in range(14):
    for arm, in_place in arms.items():
        level_pass.in_place = in_place
        times = []
        for batch in batches:
            optimizer.zero_grad()
            start = time.perf_counter()
            (module(batch) * R).sum().backward()
            optimizer.step()
            times.append(time.perf_counter() - start)
        if round_ >= 2:
            steps[arm].append(np.median(times))
for arm, values in steps.items():
    print(f"{name} h={H} {mcpu or 'this CPU'} B={B} {arm:13s} step {1e3 * np.median(values):.3f} ms "
          f"(rounds {1e3 * min(values):.3f}-{1e3 * max(values):.3f})")
