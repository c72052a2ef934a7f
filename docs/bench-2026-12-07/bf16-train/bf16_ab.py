# In-process A/B of the training step (as_torch(sparse=True) + ct.optim.Adagrad, DGL's groups): arm "bf16"
# (compile(training=True, precision="bf16"): the level pass's products on vdpbf16ps, adjoint_bf16.py) against arm
# "fp32", each round both arms back to back on 10 batches of BATCH SST trees, the median step per round; printed: the
# median over rounds 3..ROUNDS and the paired ratio.  Also the two kernels alone (the level pass's "forward" and
# "backward" calls, timed around each call) and the largest gradient difference between the arms on one batch.
# Run from the repo root: python bf16_ab.py BATCH [H [MODEL [PACK_NODES]]]   (ROUNDS=n, default 14)
import os, sys, time
os.environ.setdefault("TVM_NUM_THREADS", "2"); os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
import inspect
import numpy as np, torch
import cortex_tvm as ct
from cortex_tvm import adjoint_packed
torch.set_num_threads(2)
B = int(sys.argv[1]); H = int(sys.argv[2]) if len(sys.argv) > 2 else 150
name = sys.argv[3] if len(sys.argv) > 3 else "treelstm"
if len(sys.argv) > 4:
    adjoint_packed.PAIR_PACK_NODES = int(sys.argv[4])
trees, vocab = ct.data.sst_sample()
make = ct.models.BY_NAME[name]
width = {"embed_size": 300} if "embed_size" in inspect.signature(make).parameters else {}
kernel_times, arms = {}, {}
for arm in ("bf16", "fp32"):
    compiled = make(hidden_size=H, vocab_size=len(vocab), seed=0, **width).compile(training=True, precision=arm)
    functions = compiled.adjoint.level_pass._functions
    for key, fn in list(functions.items()):
        def timed(*args, fn=fn, key=(arm, key[0])):
            start = time.perf_counter(); out = fn(*args)
            kernel_times.setdefault(key, []).append(time.perf_counter() - start)
            return out
        functions[key] = timed
    module = compiled.as_torch(sparse=True)
    params = dict(module.named_parameters())
    rest = [v for k, v in params.items() if k != "emb"]
    opt = ct.optim.Adagrad([{"params": rest, "lr": 0.05, "weight_decay": 1e-4},
                            {"params": [params["emb"]], "lr": 0.005}], target=compiled.target)
    arms[arm] = (module, opt)
R = torch.from_numpy(np.random.default_rng(1).standard_normal((B, H)).astype(np.float32))
rng = np.random.default_rng(0)
batches = [[trees[i] for i in rng.permutation(len(trees))[:B]] for _ in range(10)]
grads = {}
for arm, (module, opt) in arms.items():
    opt.zero_grad(); (module(batches[0]) * R).sum().backward()
    grads[arm] = {k: (p.grad.to_dense() if p.grad.is_sparse else p.grad).numpy().copy() for k, p in module.named_parameters()}
rel = {k: float(np.abs(grads["bf16"][k] - grads["fp32"][k]).max() / np.abs(grads["fp32"][k]).max()) for k in grads["fp32"]}
print(f"{name} h={H} B={B} PACK_NODES={adjoint_packed.PAIR_PACK_NODES}: gradient difference bf16 vs fp32 (max abs / max abs fp32): "
      + ", ".join(f"{k} {v:.1e}" for k, v in rel.items()))
kernel_times.clear()
steps = {arm: [] for arm in arms}
for round_ in range(int(os.environ.get("ROUNDS", 14))):
    for arm, (module, opt) in arms.items():
        times = []
        for batch in batches:
            opt.zero_grad()
            start = time.perf_counter()
            (module(batch) * R).sum().backward()
            opt.step()
            times.append(time.perf_counter() - start)
        if round_ >= 2: steps[arm].append(np.median(times))
for arm, values in steps.items():
    kernels = ", ".join(f"{part} {1e3 * np.median(kernel_times[(arm, part)]):.3f} ms" for part in ("forward", "backward"))
    print(f"  {arm}: step {1e3 * np.median(values):.3f} ms (rounds {1e3 * min(values):.3f}-{1e3 * max(values):.3f}); kernels: {kernels}")
paired = np.array(steps["bf16"]) / np.array(steps["fp32"])
print(f"  paired rounds bf16/fp32: median {np.median(paired) - 1:+.1%}, quartiles {np.percentile(paired, 25) - 1:+.1%} "
      f"{np.percentile(paired, 75) - 1:+.1%}, bf16 faster in {int((paired < 1).sum())} of {len(paired)}")
