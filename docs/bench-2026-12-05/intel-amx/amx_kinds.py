"""Which zoo models precision="bf16" puts on AMX tiles on this CPU (plan.amx), H = 64 and 256."""
import cortex_tvm as ct
from cortex_tvm.bench.cases import OPTIONS
trees, vocab = ct.data.sst_sample()
for H in (64, 256):
    for name in sorted(ct.models.BY_NAME):
        c = ct.models.BY_NAME[name](hidden_size=H, vocab_size=len(vocab), **OPTIONS.get(name, {})).compile(precision="bf16")
        kinds = [s["primitive"] for s in c.trace if s["primitive"] in ("dot_bf16", "amx_bf16", "store_bf16")]
        print(f"H={H} {name}: {'AMX tiles' if c.plan.amx else ('vdpbf16ps' if 'dot_bf16' in kinds else 'storage only')} ({', '.join(kinds)})", flush=True)
