"""TreeLSTM H=256 at batch 1 (one SST tree): end to end, linearization, run() and the bare
kernel call, per level above the leaves.  `TVM_NUM_THREADS=2 python batch1_per_level.py`."""
import time, numpy as np, cortex_tvm as ct
from cortex_tvm.timing import best_of
trees, vocab = ct.data.sst_sample()
m = ct.models.TreeLSTM(hidden_size=256, vocab_size=len(vocab))
c = m.compile()
for idx in (0, 500, 700):
    b = [trees[idx]]
    lin = c.linearize(b)
    t_all = best_of(c, b, 50)
    t_lin = best_of(c.linearize, b, 50)
    t_run = best_of(c.run, lin, 50)
    args = c.signature.structure_args(lin) + [*c._weights, *c._state_buffers(lin.num_slots), np.empty((1, 256), "float32")]
    f = c._functions[0]
    t_k = best_of(lambda a: f(*a), args, 50)
    L = lin.num_levels
    print(f"tree {idx}: levels {L}, nodes {lin.num_slots}: e2e {t_all*1e6:.0f} us, linearize {t_lin*1e6:.0f}, run {t_run*1e6:.0f}, kernel call {t_k*1e6:.0f} us -> {t_k*1e6/(L-1):.1f} us/level")
