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


def test_a_padded_cross_compile_records_its_padding(tmp_path):
    """H=13 runs as a 16-wide kernel: the object wants weights padded to 16, and says so."""
    import json
    model = ct.models.TreeFC(hidden_size=13, vocab_size=20)
    path = compiler.cross_compile(model, "aarch64", tmp_path / "treefc13.o")
    meta = json.load(open(f"{path}.json"))
    assert meta["model"] == "TreeFC" and "aarch64" in meta["target"] and "cortex_main" in meta["functions"]
    pads = meta["weight_padding"]
    assert set(pads) == {"emb", "W", "b"}
    assert [13, 16] in [p[2:] for p in pads["W"]] and all(p[2:] == [13, 16] for name in pads for p in pads[name])


def test_aarch64_target_is_neon():
    target = ct.make_target("aarch64")
    assert "aarch64" in str(target) and "+neon" in str(target)
