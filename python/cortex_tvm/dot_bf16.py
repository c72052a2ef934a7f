"""TIR rewrites behind `RecSchedule.dot_bf16`: bfloat16 dot products with AVX512_BF16's `vdpbf16ps`.

`vdpbf16ps acc, a, b` adds to each of 16 float32 lanes the dot product of a
pair of bfloat16 values of `a` with the pair of `b` in the same lane: 32
multiply-adds per instruction, twice an fp32 FMA's 16, from operands of half
the bytes.  A register-tiled GEMM (`tile_gemm`) gets it as follows:

* the packed weight `W_packed[a, k, c]` (a column tile, the reduction index,
  16-lane column vectors) is written by the parameter transform as
  `W_packed[a, k // 2, c]`: a uint32 holding the bfloat16 bits of
  `W[.., k]` (low half) and `W[.., k + 1]` (high half), so a 16-lane vector
  of it is one `vdpbf16ps` operand;
* a stage before the GEMM rounds the state operand of every node to
  bfloat16 pairs once (`x[k]`, `x[k + 1]` in one uint32), where the
  operand depends only on the node and the reduction indices (otherwise,
  and inside one parallel region, each use rounds its pair);
* the GEMM's innermost reduction loop is split by 2 and the pair loop moved
  inside the 16-lane loop; the two loops become one instruction: the lane
  vector of accumulators += the weight pairs . the state pair broadcast to
  every lane;
* any other read of the weight widens its half of the pair to float32.

TVM 0.27's LLVM code generator cannot pass `<32 x bfloat>` operands (its
`bfloat16` lanes are legalized to float32 or uint16 before code generation),
so the kernel calls a small LLVM function, `cortex_dpbf16ps`, that takes
`<16 x i32>` operands, bitcasts them and calls
`llvm.x86.avx512bf16.dpbf16ps.512`; its IR is linked into the module by
TVM's `pragma_import_llvm` attribute and inlined (`alwaysinline`), so the
kernel's loop holds the instruction itself.  The code needs a CPU with
AVX512_BF16 (Intel Cooper Lake, Sapphire Rapids and later; AMD Zen 4 and
later): `check_target` refuses to build it for another.

This module holds the weights' side (the pairs, the transform that writes them, the reads
that widen them), the LLVM function and the target check; the GEMM's rewrite is
`dot_bf16_kernel.py`.
"""
from __future__ import annotations

import tvm
import tvm.sym
import tvm_ffi
from tvm import te, tirx

from . import tir_rewrites
from .target import has_features

#: the LLVM function the kernel calls for one `vdpbf16ps` (16 float32 lanes, 16 bf16 pairs)
FUNC = "cortex_dpbf16ps"
#: float32 lanes of one `vdpbf16ps`
LANES = 16
#: the attribute under which TVM's LLVM code generator links LLVM IR into the module
IMPORT_ATTR = "pragma_import_llvm"
#: the LLVM x86 feature the instruction needs
FEATURE = "avx512bf16"
#: the storage of a packed weight with pairs interleaved: two bfloat16 bit patterns per element
PAIR_STORAGE = "uint32"

#: (a, the callers' broadcast pair, is the intrinsic's last operand, the one an EVEX instruction can
#: read from memory as a broadcast: LLVM then folds the pair's load into `vdpbf16ps m32{1to16}`.
#: With a `vbroadcastss` of its own before each `vdpbf16ps`, a register tile of 8 x 1 vectors ran
#: at about 71% of the instruction's throughput on Zen 4 (2.54-2.56 against 3.59 G/s a core folded,
#: a probe of the loop alone: docs/bench-2026-12-07/bf16-tiles/broadcast_probe.txt).  The dot
#: product of two pairs does not depend on their order.)
LLVM_IR = f"""
define internal <16 x float> @{FUNC}(<16 x float> %acc, <16 x i32> %a, <16 x i32> %b) #0 {{
  %a.bf16 = bitcast <16 x i32> %a to <32 x bfloat>
  %b.bf16 = bitcast <16 x i32> %b to <32 x bfloat>
  %r = call <16 x float> @llvm.x86.avx512bf16.dpbf16ps.512(<16 x float> %acc,
                                                          <32 x bfloat> %b.bf16, <32 x bfloat> %a.bf16)
  ret <16 x float> %r
}}
declare <16 x float> @llvm.x86.avx512bf16.dpbf16ps.512(<16 x float>, <32 x bfloat>, <32 x bfloat>)
attributes #0 = {{ alwaysinline nounwind readnone "target-features"="+avx512bf16,+avx512f" }}
"""


# ----------------------------------------------------------------------------- targets
def has_feature(target) -> bool:
    """Whether the CPU target's LLVM features include AVX512_BF16 (False for a non-CPU target)."""
    return has_features(target, (FEATURE,))


def uses_dot(mod) -> bool:
    """Whether a module (or PrimFunc) calls `vdpbf16ps` through `cortex_dpbf16ps`."""
    found = []

    def on_attr(a):
        if a.attr_key == IMPORT_ATTR and FUNC in str(getattr(a.value, "value", "")):
            found.append(a)
    funcs = mod.functions.values() if isinstance(mod, tvm.IRModule) else [mod]
    for func in funcs:
        if isinstance(func, tirx.PrimFunc):
            tvm_ffi.structural_walk(func.body, (tirx.AttrStmt, on_attr), order="pre")
    return bool(found)


def check_target(mod, target) -> None:
    """ValueError when `mod` uses `vdpbf16ps` and the target's CPU lacks AVX512_BF16 (the code
    would stop with SIGILL at its first call)."""
    if uses_dot(mod) and not has_feature(target):
        mcpu = target.attrs.get("mcpu", "") if target.kind.name == "llvm" else target.kind.name
        raise ValueError(f"this schedule uses vdpbf16ps (dot_bf16), which needs a CPU with AVX512_BF16; "
                         f"the target {str(mcpu) or 'generic'!r} has none.  Build it for such a CPU "
                         "(e.g. mcpu='sapphirerapids' or 'znver4'), or leave dot_bf16 out (store_bf16 keeps "
                         "bfloat16 weights with float32 arithmetic on any CPU)")


# ----------------------------------------------------------------------------- values
def pair_bits(low, high):
    """Two float32 expressions -> one uint32: bfloat16(low) in bits 0-15, bfloat16(high) in 16-31."""
    return tir_rewrites.bf16_bits32(low) | (tir_rewrites.bf16_bits32(high) << tirx.const(16, "uint32"))


def dot_pairs(acc, bits, words):
    """`acc` (float32 x LANES) + the pair `bits` (one uint32, broadcast to every lane) . the
    LANES pairs `words` (uint32 x LANES): one `cortex_dpbf16ps` call (`vdpbf16ps`)."""
    state = tirx.Broadcast(tirx.reinterpret("int32", bits), LANES)
    return tirx.call_extern(f"float32x{LANES}", FUNC, acc, state, tirx.reinterpret(f"int32x{LANES}", words))


def pair_decode(pairs, indices):
    """The float32 value of element (a, k, c) of a weight stored as pairs: its half of
    `pairs[a, k // 2, c]` moved to the upper 16 bits."""
    a, k, c = indices
    word = tirx.BufferLoad(pairs, [a, tirx.floordiv(k, 2), c])
    shift = tirx.Cast("uint32", tirx.floormod(k, 2)) * tirx.const(16, "uint32")
    return tirx.reinterpret("float32", (word >> shift) << tirx.const(16, "uint32"))


# ----------------------------------------------------------------------------- the transform
def pack_pairs(transform, weight: str, packed_name: str, inverse_fn):
    """The parameter transform with `packed_name` (float32 [A, K, C], written by the pack block
    from `weight` through `inverse_fn`) written as uint32 pairs [A, K // 2, C]; the transform's
    own reads of the packed copy (a leaf table's) widen their half of the pair."""
    old = tir_rewrites.param(transform, packed_name)
    A, K, C = (int(d) for d in old.shape)
    raw = tir_rewrites.param(transform, weight)
    new = tirx.decl_buffer((A, K // 2, C), PAIR_STORAGE, name=packed_name, data_alignment=4)
    source = te.placeholder(tuple(int(d) for d in raw.shape), str(raw.dtype), name=weight)
    made_target = te.compute(
        (A, K // 2, C),
        lambda a, kp, c: pair_bits(source[inverse_fn(a, kp * 2, c)], source[inverse_fn(a, kp * 2 + 1, c)]),
        name=tir_rewrites.pack_block(weight))
    made = te.create_prim_func([source, made_target])
    swap = {made.params[0]: raw, made.params[1]: new}
    nest = tvm_ffi.structural_map(made.body.block.body, (tvm.ir.Var, lambda v: swap.get(v, v)), order="post")
    root = transform.body.block
    parts = list(root.body.seq) if isinstance(root.body, tirx.SeqStmt) else [root.body]
    index = [i for i, part in enumerate(parts) if has_block(part, tir_rewrites.pack_block(weight))]
    if len(index) != 1:
        raise ValueError(f"the transform has no single block {tir_rewrites.pack_block(weight)!r}")
    parts[index[0]] = nest
    body = tirx.SeqStmt(parts) if len(parts) > 1 else parts[0]
    root = tvm.s_tir.stmt.SBlock(root.iter_vars, root.reads, root.writes, root.name_hint, body, root.init,
                                 root.alloc_buffers, root.match_buffers, root.annotations)
    func = tirx.PrimFunc([new if p.same_as(old) else p for p in transform.params],
                         tvm.s_tir.stmt.SBlockRealize(transform.body.iter_values, transform.body.predicate, root),
                         attrs=transform.attrs)
    return widen_reads(func, old, new)


def has_block(stmt, name) -> bool:
    found = []
    tvm_ffi.structural_walk(stmt, (tvm.s_tir.stmt.SBlock, lambda b: found.append(b) if b.name_hint == name else None))
    return bool(found)


def widen_reads(func, old, new):
    """Every remaining load of `old` (float32 [A, K, C]) reads its half of `new`'s pair; `old`'s
    regions become `new`'s whole; the parameter becomes `new`."""
    def on_load(ld):
        if ld.source.same_as(old):
            return pair_decode(new, list(ld.indices))
        return ld

    def on_region(r):
        if r.source.same_as(old):
            return tirx.BufferRegion(new, [tvm.ir.Range.from_min_extent(0, d) for d in new.shape])
        return r

    func = tvm_ffi.structural_map(func, [(tvm.ir.TensorLoad, on_load), (tvm.ir.TensorRegion, on_region)],
                                  order="post")
    return tvm_ffi.structural_map(func, (tvm.ir.Var, lambda v: new if v.same_as(old) else v), order="post")
