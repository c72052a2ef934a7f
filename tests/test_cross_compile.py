"""Cross-compiling for an aarch64 CPU produces an AArch64 object (compile only: no ARM machine here)."""
import struct

import cortex_tvm as ct
from cortex_tvm import compiler

EM_AARCH64 = 183


def test_aarch64_object(tmp_path):
    model = ct.models.TreeFC(hidden_size=32, vocab_size=20)
    path = compiler.cross_compile(model, "aarch64", tmp_path / "treefc_aarch64.o")
    data = open(path, "rb").read()
    assert data[:4] == b"\x7fELF"
    assert struct.unpack_from("<H", data, 18)[0] == EM_AARCH64
    assert b"cortex_main" in data


def test_aarch64_target_is_neon():
    target = ct.make_target("aarch64")
    assert "aarch64" in str(target) and "+neon" in str(target)
