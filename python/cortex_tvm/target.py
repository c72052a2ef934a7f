"""Targets: TVM Targets from names, and what a CPU target offers a micro-kernel.

The ground floor of the pipeline: everything that must know which machine it
compiles for (schedule derivation, padding, tuning records, export) asks
here instead of parsing target strings itself.

    make_target("llvm")                              # this machine's CPU, all cores
    make_target({"kind": "llvm", "mcpu": "haswell"}) # AVX2 code, runnable on an AVX-512 host
    cpu_info(make_target("llvm")).lanes             # 16 on AVX-512, 8 on AVX2 (32-bit lanes)
    cpu_info(make_target("llvm")).lanes_of("bfloat16")  # 32 on AVX-512
    bytes_of("bfloat16")                             # 2: an element's bytes come from its dtype
"""
from __future__ import annotations

import functools
import os
from dataclasses import dataclass

from tvm import DataType
from tvm.target import Target, codegen

from . import config


#: LLVM x86 feature name -> /proc/cpuinfo flag, for the instruction-set extensions (LLVM's lists
#: also hold tuning hints such as "slow-3ops-lea" that no CPU reports: those are not compared)
X86_ISA = {
    "sse": "sse", "sse2": "sse2", "sse3": "pni", "ssse3": "ssse3", "sse4.1": "sse4_1", "sse4.2": "sse4_2",
    "sse4a": "sse4a", "avx": "avx", "avx2": "avx2", "fma": "fma", "fma4": "fma4", "xop": "xop",
    "f16c": "f16c", "bmi": "bmi1", "bmi2": "bmi2", "lzcnt": "abm", "popcnt": "popcnt", "movbe": "movbe",
    "aes": "aes", "pclmul": "pclmulqdq", "vaes": "vaes", "vpclmulqdq": "vpclmulqdq", "gfni": "gfni",
    "sha": "sha_ni", "adx": "adx", "cx16": "cx16", "avxvnni": "avx_vnni", "rdrnd": "rdrand",
    "rdseed": "rdseed",
    "avx512f": "avx512f", "avx512cd": "avx512cd", "avx512bw": "avx512bw", "avx512dq": "avx512dq",
    "avx512vl": "avx512vl", "avx512ifma": "avx512ifma", "avx512vbmi": "avx512vbmi",
    "avx512vbmi2": "avx512_vbmi2", "avx512vnni": "avx512_vnni", "avx512bitalg": "avx512_bitalg",
    "avx512vpopcntdq": "avx512_vpopcntdq", "avx512bf16": "avx512_bf16", "avx512fp16": "avx512_fp16",
    "amx-tile": "amx_tile", "amx-int8": "amx_int8", "amx-bf16": "amx_bf16", "amx-fp16": "amx_fp16",
    "amx-complex": "amx_complex", "prefetchi": "prefetchi", "avxifma": "avx_ifma",
    "avxneconvert": "avx_ne_convert", "cmpccxadd": "cmpccxadd",
}

#: LLVM CPU models `host_model` weighs against LLVM's own guess by the extensions a CPU reports
#: (a tie keeps LLVM's guess, then the earlier entry)
X86_MODELS = (
    "skylake-avx512", "cascadelake", "cooperlake", "icelake-server", "sapphirerapids", "emeraldrapids",
    "graniterapids", "diamondrapids", "znver3", "znver4", "znver5", "haswell", "alderlake", "arrowlake")


#: the first part of an x86 CPU's LLVM triple
X86_ARCHES = ("x86_64", "i386", "i686")


def triple_of(target: Target) -> str:
    """The LLVM triple a CPU target compiles for: its own mtriple, else this machine's."""
    return str(target.attrs.get("mtriple", "")) or codegen.llvm_get_system_triple()


def host_isa() -> set:
    """Instruction-set extensions (LLVM names) this CPU has: from /proc/cpuinfo where it exists,
    else LLVM's feature list for the detected CPU model."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
                    return {name for name, flag in X86_ISA.items() if flag in flags}
    except OSError:
        pass
    return set(model_isa(codegen.llvm_get_system_cpu()))


def host_llvm() -> dict:
    """This machine's CPU as target attributes: the LLVM CPU model that matches the extensions this
    CPU reports, minus the extensions the model has and this CPU does not report.

    A virtual machine can hide some of its CPU's extensions (a KVM guest on Zen 5 reports no
    rdseed, which LLVM's znver5 has), and code built for the model alone would then be refused
    here as foreign; this is what clang's -march=native does.  A VM can also report another CPU
    model number than its CPU's (a Sapphire Rapids guest as model 167, which LLVM takes for Rocket
    Lake: no AVX512_BF16, no AMX, one FMA unit); when a model of `X86_MODELS` matches more of the
    reported extensions than LLVM's guess, that model is taken."""
    attrs = {"kind": "llvm", "mcpu": host_model()}
    if not codegen.llvm_get_system_triple().startswith(X86_ARCHES):
        return attrs
    hidden = sorted(model_isa(attrs["mcpu"]) - host_isa())
    return {**attrs, "mattr": [f"-{f}" for f in hidden]} if hidden else attrs


@functools.lru_cache(maxsize=None)
def model_isa(mcpu: str) -> frozenset:
    """The instruction-set extensions (of X86_ISA) of an LLVM CPU model."""
    features = codegen.llvm_get_cpu_features(Target({"kind": "llvm", "mcpu": mcpu}))
    return frozenset(str(f) for f in features) & set(X86_ISA)


def host_model() -> str:
    """LLVM's guess of this CPU's model, or the model of X86_MODELS that matches more of the
    extensions it reports (each one it has and the CPU does not counts against it)."""
    guess = codegen.llvm_get_system_cpu()
    triple = codegen.llvm_get_system_triple()
    if not triple.startswith(X86_ARCHES):
        return guess
    reported = host_isa()

    def score(mcpu):
        isa = model_isa(mcpu)
        return len(isa & reported) - len(isa - reported)
    best = guess
    for mcpu in X86_MODELS:
        if codegen.llvm_is_valid_cpu(mcpu, triple) and score(mcpu) > score(best):
            best = mcpu
    return best


def make_target(target) -> Target:
    """A TVM Target from "llvm", "cuda", "aarch64", a dict or a Target.

    "llvm" means this machine's CPU with all its cores (TVM's "native" falls
    back to a generic CPU in this version, so the CPU is detected here:
    `host_llvm`).  A
    dict without "num-cores" gets this machine's thread count, so that
    `{"kind": "llvm", "mcpu": "haswell"}` builds AVX2 code that still uses
    every core here.  A dict naming this machine's own CPU model without
    "mattr" gets `host_llvm`'s (the code runs here); pass a Target to build
    for the full model.
    """
    if isinstance(target, Target):
        return target
    if isinstance(target, dict):
        if target.get("kind") == "llvm":
            mcpu = target.get("mcpu")
            triple = target.get("mtriple") or codegen.llvm_get_system_triple()
            if mcpu is not None and not codegen.llvm_is_valid_cpu(str(mcpu), str(triple)):
                # LLVM would only print a warning and build generic code
                raise ValueError(f"unknown LLVM CPU mcpu={mcpu!r} for {triple} (e.g. 'haswell' for AVX2, "
                                 f"'skylake-avx512' or 'znver4' for AVX-512)")
            if "mtriple" not in target and "mattr" not in target and mcpu == codegen.llvm_get_system_cpu():
                # this machine's CPU by LLVM's name for it: what it reports (see host_llvm)
                target = {**target, **host_llvm()}
            if "mtriple" not in target and "num-cores" not in target:
                target = {**target, "num-cores": config.load().num_threads}
        return Target(target)
    if target == "llvm":
        return Target({**host_llvm(), "num-cores": config.load().num_threads})
    if target == "cuda":
        return Target({"kind": "cuda", "arch": cuda_arch()}, host={"kind": "llvm"})
    if target == "aarch64":          # a 64-bit ARM CPU with NEON (cross-compilation)
        return Target({"kind": "llvm", "mtriple": "aarch64-linux-gnu", "mattr": ["+neon"]})
    if isinstance(target, str):
        raise ValueError(f"unknown target {target!r}: use 'llvm', 'cuda', 'aarch64', a dict or a "
                         "tvm.target.Target")
    raise TypeError(f"target must be a string, dict or tvm.target.Target, got {type(target).__name__}")


#: the CUDA architecture "cuda" means when no GPU is visible: an H100/H200
DEFAULT_CUDA_ARCH = "sm_90"


def cuda_arch() -> str:
    """"sm_XY" of the GPU TVM sees (tvm.cuda(0)), or DEFAULT_CUDA_ARCH when there is none (code
    generated and compiled to PTX here, run elsewhere: pass a Target with "arch" to choose)."""
    import tvm
    device = tvm.cuda(0)
    if device.exist:
        return "sm_" + str(device.compute_version).replace(".", "")
    return DEFAULT_CUDA_ARCH


def cuda_sm_count():
    """Streaming multiprocessors of the GPU TVM sees (tvm.cuda(0)), or None when there is none:
    the persistent kernel's grid (`single_kernel(blocks)`) is one block per SM."""
    import tvm
    device = tvm.cuda(0)
    return int(device.multi_processor_count) if device.exist else None


def bytes_of(dtype) -> int:
    """Bytes of one element of `dtype` (a string or a TVM DataType): "float32" 4, "bfloat16" and
    "float16" 2, "int8" 1, a vector type such as "float32x8" all its lanes (32).  Every byte count
    of an element (register tiles, tables, operands read) takes it from here, not a literal 4."""
    dtype = DataType(str(dtype))
    return dtype.bits * dtype.lanes // 8


#: the bits of the unit `CpuInfo.lanes` counts in (a float32 or int32 lane)
LANE_BITS = 32
#: the per-function stack budget for register tiles: the largest register tile, in bytes, the
#: build keeps on the stack (the whole AVX-512 register file, 32 x 64 B).  TVM's LowerTVMBuiltin
#: moves any allocation of 1 KB or more to a heap workspace, which LLVM cannot promote to
#: registers (3x slower); the build's TIR pipeline (`tir_pipeline.KeepTilesOnStack`) keeps an
#: allocation up to this size an alloca instead, and the derived schedule (`policy.derive.fits`)
#: plans no tile above it
STACK_BYTES = 2048


@dataclass(frozen=True)
class CpuInfo:
    """What a register-tiled micro-kernel needs to know about a CPU target.

    The vector width is the register's (`vector_bits`); `lanes` counts it in 32-bit lanes, the
    float32 lanes every kernel here computes in, and `lanes_of(dtype)` in any element type."""

    #: 32-bit (float32) lanes of one vector register (16 AVX-512, 8 AVX/AVX2, 4 SSE/NEON):
    #: the vector width in LANE_BITS units, kept as the field for compatibility
    lanes: int
    #: architectural vector registers (32 zmm with AVX-512 or on AArch64, 16 ymm/xmm otherwise)
    registers: int
    #: cores the kernel's parallel loops are split over
    cores: int
    #: the vector ISA in one word, part of a tuning record's key
    isa: str
    #: the LLVM CPU name ("" when the target names none)
    mcpu: str
    #: full-width vector FMAs a core starts per cycle (`fma_units`): 2 where a tile of more
    #: accumulators pays for its padding, 1 where the FMA rate, not the loads, is the limit
    fma_units: int = 1

    @property
    def key(self) -> str:
        """Identifies code compatibility and tuning relevance: `znver4/avx512`."""
        return f"{self.mcpu or 'generic'}/{self.isa}"

    @property
    def vector_bits(self) -> int:
        """Bits of one vector register (512 AVX-512, 256 AVX/AVX2, 128 SSE/NEON)."""
        return self.lanes * LANE_BITS

    def lanes_of(self, dtype) -> int:
        """Elements of `dtype` one vector register holds (AVX-512: float32 16, bfloat16 and
        float16 32, int8 64); at least 1."""
        return max(1, self.vector_bits // (8 * bytes_of(dtype)))


#: LLVM CPU names whose cores start two FMAs of their full vector width per cycle (AVX-512
#: server parts with both ports, Zen 5's 512-bit datapath, and the AVX2 cores' two 256-bit
#: ports); any other CPU counts one (Zen 4 splits a 512-bit FMA in two, client Ice Lake and
#: Tiger Lake have one 512-bit port, and an unknown CPU is not assumed to have more)
TWO_FMA_UNITS = frozenset({
    "znver5", "skylake-avx512", "cascadelake", "cooperlake", "icelake-server", "sapphirerapids",
    "emeraldrapids", "graniterapids", "graniterapids-d", "diamondrapids",
    "haswell", "broadwell", "skylake", "alderlake", "raptorlake", "meteorlake", "arrowlake",
    "znver1", "znver2", "znver3"})


def fma_units(mcpu: str, isa: str) -> int:
    """Full-width vector FMAs per cycle of an LLVM CPU name for the vector ISA its code uses
    (code for a narrower ISA than the CPU's own gets the narrower units: Zen 4 runs AVX2 at 2)."""
    if mcpu in TWO_FMA_UNITS or (isa in ("avx2", "avx") and mcpu.startswith(("znver4", "icelake", "tigerlake",
                                                                             "rocketlake"))):
        return 2
    return 1


def cpu_info(target) -> CpuInfo:
    """Vector width, register count and cores of a CPU target (from LLVM's feature list).

    LLVM's own `llvm_get_vector_width` reports 512 even for Haswell, so the
    width is read from the features instead.
    """
    target = make_target(target)
    if target.kind.name != "llvm":
        raise ValueError(f"cpu_info: {target.kind.name!r} is not a CPU target")
    features = set(codegen.llvm_get_cpu_features(target))
    triple = triple_of(target)
    if triple.startswith("aarch64") or "neon" in features:
        vector_bits, registers, isa = 128, 32, "neon"
    elif "avx512f" in features:
        vector_bits, registers, isa = 512, 32, "avx512"
    elif "avx2" in features or "avx" in features:
        vector_bits, registers, isa = 256, 16, "avx2" if "avx2" in features else "avx"
    else:
        vector_bits, registers, isa = 128, 16, "sse"
    cores = int(target.attrs.get("num-cores", 0) or config.load().num_threads)
    mcpu = str(target.attrs.get("mcpu", ""))
    return CpuInfo(vector_bits // LANE_BITS, registers, max(1, cores), isa, mcpu, fma_units(mcpu, isa))


#: (L1 data, L2, L3) bytes assumed where the host does not say (a common x86 server core)
DEFAULT_CACHES = (32 * 1024, 1024 * 1024, 32 * 1024 * 1024)


def host_caches() -> tuple:
    """(L1 data, L2, L3) bytes of this host's first CPU, from sysfs (DEFAULT_CACHES where absent)."""
    found = {}
    root = "/sys/devices/system/cpu/cpu0/cache"
    try:
        entries = sorted(os.listdir(root))
    except OSError:
        return DEFAULT_CACHES
    for entry in entries:
        try:
            with open(os.path.join(root, entry, "level")) as f:
                level = int(f.read())
            with open(os.path.join(root, entry, "type")) as f:
                kind = f.read().strip()
            with open(os.path.join(root, entry, "size")) as f:
                text = f.read().strip()
        except (OSError, ValueError):
            continue
        if kind == "Instruction":
            continue
        scale = {"K": 1024, "M": 1024 ** 2, "G": 1024 ** 3}.get(text[-1:], 1)
        found[level] = int(text.rstrip("KMG")) * scale
    return tuple(found.get(level, default) for level, default in zip((1, 2, 3), DEFAULT_CACHES))


@dataclass(frozen=True)
class Machine:
    """What a cost model needs to know of the CPU a kernel runs on: the target's vector lanes,
    registers and cores, and the caches of the machine that runs it (bytes per core for L1 and
    L2, the shared L3).  `lanes` counts 32-bit (float32) lanes, as `CpuInfo.lanes` does."""
    lanes: int
    registers: int
    cores: int
    l1: int
    l2: int
    l3: int

    @classmethod
    def of(cls, target, caches=None, info=None) -> "Machine":
        """The target's CPU facts (`info`: its `cpu_info`, when known) with `caches` (l1, l2, l3),
        by default this host's."""
        info = cpu_info(target) if info is None else info
        l1, l2, l3 = caches or host_caches()
        return cls(info.lanes, info.registers, info.cores, int(l1), int(l2), int(l3))


def has_features(target, features) -> bool:
    """Whether a CPU target's LLVM features include every one of `features` (False for a non-CPU
    target)."""
    target = make_target(target)
    return target.kind.name == "llvm" and set(features) <= set(codegen.llvm_get_cpu_features(target))


def host_features() -> set:
    """LLVM feature names of the CPU this process runs on."""
    return set(codegen.llvm_get_cpu_features(Target(host_llvm())))
