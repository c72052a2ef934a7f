# In-process A/B of the training step (as_torch(sparse=True) + ct.optim.Adagrad, DGL's groups), arm "new" against arm
# "old", for one lever.  Run from the repo root: python levers_ab.py recip|split|panels|aligned|flush|vectors|transpose|persist BATCH [H [MCPU|- [MODEL]]];
# alternating rounds on 10 batches of BATCH SST trees; per round the median step; printed: the median over rounds 3..14
# (ROUNDS=n: rounds 3..n).
#   recip:  "new" builds the level pass with sigmoid and tanh as 1 / d by three Newton steps from the exponent trick's
#           first guess (no vdivps); "old" as fast_math.py has them (a division).
#   split:  "new" builds the training forward with every contraction on shares of the *nodes*
#           (adjoint_nest.SPLIT_WEIGHT_BYTES past any weight), so that each core's elementwise part reads the gates it
#           wrote itself; "old": U's and W's products split by columns, the elementwise part by nodes.
#   aligned: "new" is the package as it is, which also copies into panels (`Widened`) the weights the backward reads
#           in blocks of whole lines (h = 128: U's 2 x 128); "old" builds without those copies (as before d72a7a7),
#           reading those weights as they lie.
#   panels: "new" is the package as it is (the weights' copies in panels, adjoint_copies.py since 2c1be85); "old" builds
#           with the copies as they were (b366e8d's adjoint_copies.py, read from git and put in place while built).
#   flush:  "new" is the package as it is (FTZ/DAZ set around each kernel and parallel task, flush_denormals.py);
#           "old" builds without that pass (the compile cache emptied first so that nothing built is shared).
#   vectors: "new" builds whole tiles of 8 nodes x 2 vectors on any CPU with 32 vector registers (as on two FMA units);
#           "old" as the package picks (`adjoint_nest.tile_vectors`: 1 where one FMA unit, Zen 4).
#   transpose: "new" is the package as it is (emit_transpose reads each source row along its columns, since 2026-12-07);
#           "old" builds with 7ce8a69's emit_transpose (a copy's row lane by lane: gathers).
#   persist: "new" builds each level loop of the pass as one parallel region, a barrier after each parallel loop
#           (../../bench-2026-12-07/persist/persistent_pass.py, a probe); "old" as the package builds it.
# (levers.txt's runs were made as recip_ab.py and split_ab.py, ../intel-panels/panels_ab.txt's as panels_ab.py: this
# script's arms, the same code, before they were one file.)
import os, sys, time, contextlib
os.environ.setdefault("TVM_NUM_THREADS", "2"); os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
import numpy as np, torch
import cortex_tvm as ct
from cortex_tvm import adjoint_kernel, adjoint_nest, fast_math as fm
from tvm import tirx
_f = fm._f
def recip(d, steps=3):
    # d in [1, 1e35]: 1/d by Newton's iteration from the exponent trick's first guess
    def body(dv):
        r = tirx.reinterpret("float32", tirx.const(0x7EF311C3, "int32") - tirx.reinterpret("int32", dv))
        for i in range(steps):
            r = fm._let(f"rcp_{i}", r, lambda rv: rv + rv * (_f(1.0) - dv * rv))
        return r
    return fm._let("rcp_d", d, body)
def sig(x): return recip(_f(1.0) + fm.fast_exp(tirx.min(-x, _f(80.0))))
def tanh(x): return _f(2.0) * recip(_f(1.0) + fm.fast_exp(tirx.min(_f(-2.0) * x, _f(80.0)))) - _f(1.0)
torch.set_num_threads(2)
ARM = sys.argv.pop(1)
B = int(sys.argv[1]); H = int(sys.argv[2]) if len(sys.argv) > 2 else 150
mcpu = sys.argv[3] if len(sys.argv) > 3 and sys.argv[3] != "-" else None
name = sys.argv[4] if len(sys.argv) > 4 else "treelstm"
trees, vocab = ct.data.sst_sample()
import inspect
make = ct.models.BY_NAME[name]
width = {"embed_size": 300} if "embed_size" in inspect.signature(make).parameters else {}
@contextlib.contextmanager
def recip_code():
    old = dict(fm._REWRITES)
    fm._REWRITES["tirx.sigmoid"] = sig; fm._REWRITES["tirx.tanh"] = tanh
    try: yield
    finally: fm._REWRITES.update(old)
@contextlib.contextmanager
def split_code():
    before = adjoint_nest.SPLIT_WEIGHT_BYTES
    adjoint_nest.SPLIT_WEIGHT_BYTES = 1 << 40
    try: yield
    finally: adjoint_nest.SPLIT_WEIGHT_BYTES = before
@contextlib.contextmanager
def copies_at(commit, names, clear=False):
    """adjoint_kernel's `names` from `commit`'s adjoint_copies.py (read from git) while built; clear: the compile
    cache emptied around it, so that nothing built is shared between the arms."""
    import subprocess, types
    from cortex_tvm import compile_cache
    source = subprocess.run(["git", "show", f"{commit}:python/cortex_tvm/adjoint_copies.py"], capture_output=True,
                            text=True, check=True).stdout
    old = types.ModuleType(f"cortex_tvm.adjoint_copies_{commit}")
    old.__package__ = "cortex_tvm"
    exec(compile(source, f"adjoint_copies_{commit}.py", "exec"), old.__dict__)
    saved = {n: getattr(adjoint_kernel, n) for n in names}
    for n in names:
        setattr(adjoint_kernel, n, getattr(old, n))
    if clear: compile_cache._cache.clear()
    try: yield
    finally:
        for n, v in saved.items(): setattr(adjoint_kernel, n, v)
        if clear: compile_cache._cache.clear()
def old_code():
    """The weights' copies as they were before panels (b366e8d's adjoint_copies.py), while built."""
    return copies_at("b366e8d", ("Transposed", "Widened", "emit_transpose", "emit_widen", "copied_reads"))
@contextlib.contextmanager
def unaligned_code():
    """copied_reads as before d72a7a7, no backward copy (`Widened`) for blocks of whole lines (h = 128, 256), while
    built."""
    import inspect, types
    from cortex_tvm import adjoint_copies
    source = inspect.getsource(adjoint_copies).replace("if block is not None}",
                                                       "if block is not None and block % LINE_LANES}")
    assert source != inspect.getsource(adjoint_copies), "copied_reads has changed: this arm no longer applies"
    patched = types.ModuleType("cortex_tvm.adjoint_copies_unaligned")
    patched.__package__ = "cortex_tvm"
    exec(compile(source, "adjoint_copies_unaligned.py", "exec"), patched.__dict__)
    saved = adjoint_kernel.copied_reads
    adjoint_kernel.copied_reads = patched.copied_reads
    try: yield
    finally: adjoint_kernel.copied_reads = saved
@contextlib.contextmanager
def unflushed_code():
    """The kernels built without FlushDenormals (MXCSR as the caller left it), while built."""
    from cortex_tvm import compile_cache, tir_pipeline
    saved = tir_pipeline.FlushDenormals
    tir_pipeline.FlushDenormals = lambda mod: mod
    compile_cache._cache.clear()
    try: yield
    finally:
        tir_pipeline.FlushDenormals = saved
        compile_cache._cache.clear()
@contextlib.contextmanager
def two_vector_code():
    """Whole tiles of 8 nodes x 2 vectors wherever AVX-512's 32 registers hold them (tile_vectors 2), while built."""
    from cortex_tvm import adjoint_pass
    saved = adjoint_pass.tile_vectors
    adjoint_pass.tile_vectors = lambda info: 2 if info.registers >= 32 else 1
    try: yield
    finally: adjoint_pass.tile_vectors = saved
def gather_transpose_code():
    """emit_transpose as it was at 7ce8a69 (a copy's row lane by lane from 16 source rows: gathers), while built."""
    return copies_at("7ce8a69", ("emit_transpose",), clear=True)
@contextlib.contextmanager
def persistent_code():
    """The level pass with each level loop one parallel region (../../bench-2026-12-07/persist/persistent_pass.py),
    while built."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench-2026-12-07",
                                    "persist"))
    import persistent_pass
    from cortex_tvm import adjoint_pass
    saved = adjoint_pass.level_pass
    adjoint_pass.level_pass = lambda *a, **k: (lambda built: (persistent_pass.persistent(built[0]), built[1]))(
        saved(*a, **k))
    try: yield
    finally: adjoint_pass.level_pass = saved
null = contextlib.nullcontext
#: each lever's (context the "new" arm is built in, the "old" arm's)
new_code, old_code = {"recip": (recip_code, null), "split": (split_code, null), "panels": (null, old_code),
                      "aligned": (null, unaligned_code), "flush": (null, unflushed_code),
                      "vectors": (two_vector_code, null),
                      "transpose": (null, gather_transpose_code), "persist": (persistent_code, null)}[ARM]
arms = {}
for arm in ("new", "old"):
    model = make(hidden_size=H, vocab_size=len(vocab), seed=0, **width)
    with (new_code() if arm == "new" else old_code()):
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
outs = {}
for arm, (module, opt) in arms.items():
    opt.zero_grad(); out = module(batches[0]); (out * R).sum().backward()
    outs[arm] = (out.detach().numpy().copy(), {k: (p.grad.to_dense() if p.grad.is_sparse else p.grad).numpy().copy() for k, p in module.named_parameters()})
rel = max(float(np.abs(outs["new"][1][k] - outs["old"][1][k]).max() / np.abs(outs["old"][1][k]).max()) for k in outs["new"][1])
print(f"forward max diff {np.abs(outs['new'][0] - outs['old'][0]).max():.2e}, max gradient rel difference {rel:.2e}")
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
    print(f"{name} h={H} {mcpu or 'this CPU'} B={B}: {arm:4s} step {1e3 * np.median(values):.3f} ms (rounds {1e3 * min(values):.3f}-{1e3 * max(values):.3f})")
n, o = np.median(steps["new"]), np.median(steps["old"])
print(f"new/old {n / o - 1:+.1%}")
paired = np.array(steps["new"]) / np.array(steps["old"])        # each round's pair, run back to back: drift cancels
print(f"paired rounds new/old: median {np.median(paired) - 1:+.1%}, quartiles {np.percentile(paired, 25) - 1:+.1%} "
      f"{np.percentile(paired, 75) - 1:+.1%}, new faster in {int((paired < 1).sum())} of {len(paired)}")
