# The two builds of lines_ab.py (the weights' copies on cache lines, and the code before: plain transposes, no
# widened copies) give the same bits: one forward and backward per case on the same batch of 25 SST trees through
# as_torch(sparse=True); every root and every weight's gradient compared with np.array_equal.  Run from the repo
# root: python same_bits.py (lines_ab.py takes old_code from here)
import contextlib, inspect, os
os.environ.setdefault("TVM_NUM_THREADS", "2"); os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
import numpy as np, torch
import cortex_tvm as ct
from cortex_tvm import adjoint_kernel


@contextlib.contextmanager
def old_code():
    real_t, real_c = adjoint_kernel.Transposed, adjoint_kernel.copied_reads
    adjoint_kernel.Transposed = lambda shape, block=None: real_t(shape, None)
    adjoint_kernel.copied_reads = lambda e: (real_c(e)[0], {})
    try:
        yield
    finally:
        adjoint_kernel.Transposed, adjoint_kernel.copied_reads = real_t, real_c


def main():
    trees, vocab = ct.data.sst_sample()
    batch = [trees[i] for i in np.random.default_rng(0).permutation(len(trees))[:25]]
    for name, H in (("treelstm", 150), ("treelstm", 300), ("treegru", 150), ("treefc", 150)):
        make = ct.models.BY_NAME[name]
        width = {"embed_size": 300} if "embed_size" in inspect.signature(make).parameters else {}
        results = []
        for arm in ("new", "old"):
            with (old_code() if arm == "old" else contextlib.nullcontext()):
                compiled = make(hidden_size=H, vocab_size=len(vocab), seed=0, **width).compile(training=True)
                for part in ("forward", "backward", "all"):
                    compiled.adjoint.level_pass.function(part, True)
            module = compiled.as_torch(sparse=True)
            R = torch.from_numpy(np.random.default_rng(1).standard_normal((25, H)).astype(np.float32))
            out = module(batch)
            (out * R).sum().backward()
            grads = {k: (p.grad.to_dense() if p.grad.is_sparse else p.grad).numpy().copy()
                     for k, p in module.named_parameters()}
            results.append((out.detach().numpy().copy(), grads))
        (out_new, g_new), (out_old, g_old) = results
        same = np.array_equal(out_new, out_old) and all(np.array_equal(g_new[k], g_old[k]) for k in g_new)
        print(f"{name} h={H} batch 25: roots and gradients of {sorted(g_new)} the same bits: {same}")


if __name__ == "__main__":
    main()
