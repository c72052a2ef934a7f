"""Fuzz worker (run as a script, in its own process): altered exports through `ct.load`. Each
case copies an export and alters it: a file cut at a random length, a random bit flipped, bytes
appended, a file deleted, or a file swapped in from another export of the same model with other
weights. Allowed outcomes: ValueError/TypeError (FileNotFoundError when meta.json itself
is gone: not an export), or a model whose answers are exactly those of
the export that every file now comes from. A signal kills this process; the test that started
it reports the last case it began.

    python tests/hardening/fuzz_load.py CASES WORKDIR PROGRESS_FILE  ->  prints one JSON summary line
"""
import hashlib
import json
import os
import shutil
import sys

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import cortex_tvm as ct

V = 30
FILES = ("lib.so", "meta.json", "weights.npz")


def exports(workdir):
    """Two exports of one TreeFC program (other weights), and their answers on a few trees."""
    trees = ct.data.random_trees(4, (1, 9), seed=2, vocab_size=V)
    out = []
    for seed in (0, 1):
        compiled = ct.models.TreeFC(hidden_size=8, vocab_size=V, seed=seed).compile()
        out.append((compiled.export(os.path.join(workdir, f"export{seed}")), compiled(trees)))
    return trees, out


def _digest(path):
    """The file's sha256; for meta.json, of its JSON content (whitespace between JSON tokens is
    not content: a newline flipped to a tab loads the same export)."""
    with open(path, "rb") as f:
        data = f.read()
    if os.path.basename(path) == "meta.json":
        try:
            data = json.dumps(json.loads(data), sort_keys=True).encode()
        except ValueError:
            pass
    return hashlib.sha256(data).hexdigest()


def alter(directory, other, kind, name, position, bit):
    path = os.path.join(directory, name)
    if kind == "delete":
        os.remove(path)
        return
    if kind == "swap":
        shutil.copyfile(os.path.join(other, name), path)
        return
    data = bytearray(open(path, "rb").read())
    if kind == "cut":
        data = data[:position % (len(data) + 1)]
    elif kind == "flip" and data:
        data[position % len(data)] ^= 1 << bit
    elif kind == "append":
        data += bytes([position % 256]) * (1 + position % 64)
    with open(path, "wb") as f:
        f.write(bytes(data))


def main(cases: int, workdir: str, progress_path: str):
    trees, made = exports(workdir)
    originals = [{name: _digest(os.path.join(path, name)) for name in FILES} for path, _ in made]
    counts = {"cases": 0, "refused": 0, "loaded": 0, "wrong": 0}
    wrong = []
    progress = open(progress_path, "w", buffering=1)
    scratch = os.path.join(workdir, "case")

    @settings(max_examples=cases, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    @given(which=st.integers(0, 1),
           changes=st.lists(st.tuples(st.sampled_from(("cut", "flip", "flip", "append", "delete", "swap")),
                                      st.sampled_from(FILES), st.integers(0, 1 << 24), st.integers(0, 7)),
                            min_size=1, max_size=3))
    def case(which, changes):
        counts["cases"] += 1
        progress.write(json.dumps({"case": counts["cases"], "export": which, "changes": changes}) + "\n")
        shutil.rmtree(scratch, ignore_errors=True)
        shutil.copytree(made[which][0], scratch)
        for kind, name, position, bit in changes:
            if kind == "swap" or os.path.exists(os.path.join(scratch, name)):
                alter(scratch, made[1 - which][0], kind, name, position, bit)
        try:
            loaded = ct.load(scratch)
        except (ValueError, TypeError):
            counts["refused"] += 1
            return
        except FileNotFoundError:       # no meta.json: not an export at all (as open() says)
            if os.path.exists(os.path.join(scratch, "meta.json")):
                raise
            counts["refused"] += 1
            return
        counts["loaded"] += 1
        now = {name: _digest(os.path.join(scratch, name)) if os.path.exists(os.path.join(scratch, name)) else None
               for name in FILES}
        source = [i for i, digests in enumerate(originals) if digests == now]
        got = loaded(trees)
        if not source or not np.array_equal(got, made[source[0]][1]):
            counts["wrong"] += 1
            wrong.append({"export": which, "changes": changes, "files_from": source})

    case()
    print(json.dumps({**counts, "first_wrong": wrong[:3]}))


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2], sys.argv[3])
