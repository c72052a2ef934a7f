"""The validation cost of run(lin) at batch 1: the compiled check and the numpy check against the call.
    TVM_NUM_THREADS=2 python docs/bench-2026-12-02/fuzz/check-cost.py
"""
import time, numpy as np, cortex_tvm as ct, timeit
trees, vocab = ct.data.sst_sample()
for M, kw in ((ct.models.TreeLSTM, {}), (ct.models.ChildSumTreeLSTM, {"max_children": 8})):
    m = M(hidden_size=256, vocab_size=len(vocab), **kw) if M is ct.models.TreeLSTM else M(256, len(vocab), **kw)
    c = m.compile()
    print(type(m).__name__, "check kernel", c._check_kernel is not None)
    lins = [c.linearize([t]) for t in trees[:100]]
    for lin in lins[:3]: c.run(lin)
    def per(f):
        best = 1e9
        for _ in range(5):
            t = time.perf_counter()
            for lin in lins: f(lin)
            best = min(best, (time.perf_counter() - t) / len(lins))
        return best * 1e6
    k = per(lambda lin: c.run(lin, check=False)); v = per(c.check); v2 = per(c._check_in_numpy)
    print(f"  run {k:.1f} us, compiled check {v:.2f} us ({100*v/k:.2f}%), numpy check {v2:.1f} us ({100*v2/k:.1f}%)")
