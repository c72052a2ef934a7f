"""Bytes per element come from the dtype (`target.bytes_of`), and a CPU's vector width holds
`CpuInfo.lanes_of(dtype)` elements of it; `CpuInfo.lanes` stays the 32-bit (float32) lanes."""
import pytest
import tvm

from cortex_tvm.target import CpuInfo, bytes_of, cpu_info, make_target

AVX512 = CpuInfo(lanes=16, registers=32, cores=2, isa="avx512", mcpu="znver4")
AVX2 = CpuInfo(lanes=8, registers=16, cores=2, isa="avx2", mcpu="haswell", fma_units=2)
NEON = CpuInfo(lanes=4, registers=32, cores=2, isa="neon", mcpu="")


@pytest.mark.parametrize("dtype, size", [("float32", 4), ("bfloat16", 2), ("float16", 2), ("int8", 1),
                                         ("uint16", 2), ("uint32", 4), ("float64", 8), ("float32x8", 32)])
def test_bytes_of_reads_the_dtype(dtype, size):
    assert bytes_of(dtype) == size
    assert bytes_of(tvm.DataType(dtype)) == size          # a buffer's dtype object too


@pytest.mark.parametrize("info, bits, lanes", [
    (AVX512, 512, {"float32": 16, "bfloat16": 32, "float16": 32, "int8": 64}),
    (AVX2, 256, {"float32": 8, "bfloat16": 16, "float16": 16, "int8": 32}),
    (NEON, 128, {"float32": 4, "bfloat16": 8, "float16": 8, "int8": 16}),
])
def test_lanes_of_a_dtype_follow_the_vector_width(info, bits, lanes):
    assert info.vector_bits == bits
    assert {dtype: info.lanes_of(dtype) for dtype in lanes} == lanes
    assert info.lanes == info.lanes_of("float32")           # the field: 32-bit lanes, as before


def test_cpu_info_of_a_target_keeps_float32_lanes():
    haswell = cpu_info(make_target({"kind": "llvm", "mcpu": "haswell"}))
    spr = cpu_info(make_target({"kind": "llvm", "mtriple": "x86_64-linux-gnu", "mcpu": "sapphirerapids"}))
    assert (haswell.lanes, haswell.vector_bits, haswell.lanes_of("bfloat16")) == (8, 256, 16)
    assert (spr.lanes, spr.vector_bits, spr.lanes_of("bfloat16"), spr.lanes_of("int8")) == (16, 512, 32, 64)
