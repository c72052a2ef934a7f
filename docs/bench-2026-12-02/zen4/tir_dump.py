"""The scheduled TIR of TreeLSTM/TreeFC H=64 (fp32 and bf16, znver4): run under PYTHONPATH=<old checkout>/python and at HEAD, then cmp
    the two files (c4c51d0 against the final code: identical, see tir-compare.txt)."""
import sys, cortex_tvm as ct
from cortex_tvm.build import schedule_model
from cortex_tvm.padding import padded_model
from cortex_tvm.recipes import resolve, with_precision
from cortex_tvm.target import make_target
print(ct.__file__, file=sys.stderr)
out = []
for name in ("TreeLSTM", "TreeFC"):
    m = getattr(ct.models, name)(hidden_size=64, vocab_size=50)
    tgt = make_target({"kind": "llvm", "mcpu": "znver4"})
    km = padded_model(m, tgt)
    for prec in ("fp32", "bf16"):
        rs, _ = schedule_model(km, tgt, with_precision(resolve(km, tgt, None), prec))
        out.append(f"== {name} {prec}\n" + rs.script())
open(sys.argv[1], "w").write("\n".join(out))
