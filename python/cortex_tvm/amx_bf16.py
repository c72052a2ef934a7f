"""`amx_bf16` (`RecSchedule.amx_bf16`): the GEMMs `dot_bf16` put on `vdpbf16ps` run on Intel AMX
tiles (`tdpbf16ps`), 16 nodes at a time.  This module holds the target's side (the features,
the build's check, the tile state a process asks Linux for); the rewrite is
`amx_bf16_kernel.py`.

An AMX core holds eight tile registers of up to 16 rows x 64 bytes.  `tdpbf16ps C, A, B`
adds to the float32 tile C (rows x 16) the product of A (rows x 16 bfloat16 pairs) and B (16
pair rows x 16 columns, each element a pair): 16 x 16 x 32 = 8192 multiply-adds, the work of
256 `vdpbf16ps` (32 each).  The operands `dot_bf16` lays out are already the tiles' layouts:

* B: the weight's pairs `W_packed[a, kp, c]` (uint32: `W[.., 2 kp]` low, `W[.., 2 kp + 1]`
  high), 16 consecutive `kp` rows of 16 consecutive columns: one `tileloadd` with the packed
  row as stride;
* A: the state pairs `<gemm>_x_pairs[n, .., kp]` rounded once per node before the GEMM: 16
  consecutive pairs of up to 16 consecutive nodes;
* C: the accumulators `acc[n, .., c .. c + 16]` of up to 16 nodes, stored once at the end.

The intrinsics are LLVM's (`llvm.x86.tileloadd64` and the rest, with the tile register as an
immediate), called from TIR.  Linux lends a process the 8 KB of tile state only once it asks
(`arch_prctl(ARCH_REQ_XCOMP_PERM)`): `request_permission` does, before any AMX code runs; without
it the first tile instruction stops the process.  The build asks when it builds AMX code this
CPU runs (`compile_cache.build_module`), the loader when an export's plan says `amx`.
"""
from __future__ import annotations

import ctypes

import tvm
import tvm_ffi
from tvm import tirx

from .target import has_features, host_isa

#: the LLVM x86 features the code needs
FEATURES = ("amx-tile", "amx-bf16")
#: the LLVM intrinsic whose calls mark AMX code (`uses_amx`)
DOT = "llvm.x86.tdpbf16ps"
#: bytes of a tile's row (16 float32 columns, or 16 bfloat16 pairs) and of a tile configuration
ROW_BYTES, CONFIG_BYTES = 64, 64

_SYS_ARCH_PRCTL, _ARCH_REQ_XCOMP_PERM, _XFEATURE_XTILEDATA = 158, 0x1023, 18
_permission = []


# ----------------------------------------------------------------------------- TIR
def intrin(name, *args):
    """The statement calling the LLVM intrinsic `name` (AMX's take the tile register as an
    immediate: `tile`)."""
    return tirx.Evaluate(tirx.call_llvm_intrin("void", name, *args))


def tile(index):
    """Tile register `index` as the intrinsics take it."""
    return tirx.const(index, "uint8")


def config_bytes(shapes: dict) -> list:
    """The CONFIG_BYTES bytes of a tile configuration (palette 1) for {tile register: (rows,
    bytes a row)}, each an int or, for rows, a uint8 expression; the rest zero.  `ldtilecfg`
    loads it; a configuration is a thread's state: each thread that runs tiles loads one."""
    values = [0] * CONFIG_BYTES
    values[0] = 1
    for t, (rows, colsb) in shapes.items():
        values[16 + 2 * t] = colsb          # (a little-endian uint16: its high byte stays 0)
        values[48 + t] = rows
    return [tirx.const(v, "uint8") if isinstance(v, int) else v for v in values]


# ----------------------------------------------------------------------------- targets
def has_feature(target) -> bool:
    """Whether the CPU target's LLVM features include AMX tiles with bfloat16 products."""
    return has_features(target, FEATURES)


def uses_amx(mod) -> bool:
    """Whether a module (or PrimFunc) holds AMX tile products."""
    dot_id = tvm.target.codegen.llvm_lookup_intrinsic_id(DOT)
    found = []

    def on_call(call):
        if call.op.same_as(tvm.ir.Op.get("tirx.call_llvm_intrin")) and int(call.args[0]) == dot_id:
            found.append(call)
    funcs = mod.functions.values() if isinstance(mod, tvm.IRModule) else [mod]
    for func in funcs:
        if isinstance(func, tirx.PrimFunc):
            tvm_ffi.structural_walk(func.body, (tvm.ir.Call, on_call))
    return bool(found)


def check_target(mod, target) -> None:
    """For a build of `mod`: ValueError when it uses AMX and the target's CPU has no AMX-BF16;
    AMX code that this CPU runs gets the process's tile state (`request_permission`), and code
    built here for another CPU, never run here, asks for nothing."""
    if not uses_amx(mod):
        return
    if not has_feature(target):
        mcpu = target.attrs.get("mcpu", "") if target.kind.name == "llvm" else target.kind.name
        raise ValueError(f"this schedule uses AMX tiles (amx_bf16), which need a CPU with AMX-BF16; the target "
                         f"{str(mcpu) or 'generic'!r} has none.  Build it for such a CPU (mcpu='sapphirerapids'), "
                         "or leave amx_bf16 out (dot_bf16 and store_bf16 run without AMX)")
    if set(FEATURES) <= host_isa():
        request_permission()


def request_permission() -> None:
    """Ask Linux for this process's AMX tile state (once; a no-op after the first success).
    RuntimeError when the kernel refuses (too old, or AMX disabled)."""
    if _permission:
        return
    status = ctypes.CDLL(None, use_errno=True).syscall(_SYS_ARCH_PRCTL, _ARCH_REQ_XCOMP_PERM, _XFEATURE_XTILEDATA)
    if status != 0:
        raise RuntimeError(f"Linux refused this process the AMX tile state (arch_prctl ARCH_REQ_XCOMP_PERM: "
                           f"errno {ctypes.get_errno()}); AMX code cannot run here: compile with precision='bf16' "
                           "for a target without AMX (e.g. mcpu='cooperlake') or with precision='fp32'")
    _permission.append(True)
