"""Fuzz worker (run as a script, in its own process): hand-edited `Linearized` arrays through
`CompiledModel.run`, for a few kernels. Each case takes a valid layout, applies random edits
(an element set to a random or extreme value or moved by -2..2, two elements swapped, an array
cut or grown, a dtype changed) and runs it. Allowed outcomes: ValueError/TypeError, or a result equal to the
model's own numpy executor on the same (edited) arrays, which `run` accepted as valid. Where
both can read the arrays, the compiled check (`check_kernel`) and `linearize.check_bounds` must
give the same verdict. A signal
kills this process, and the test that started it reports the last case it began.

    python tests/hardening/fuzz_run.py CASES PROGRESS_FILE  ->  prints one JSON summary line
"""
import dataclasses
import json
import sys

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import cortex_tvm as ct
from cortex_tvm.policy import derive
from cortex_tvm.target import cpu_info, make_target

H, V = 16, 40
ARRAYS = ("level_offsets", "children", "num_children", "words", "roots")
EXTREMES = (-1, -2 ** 31, 2 ** 31 - 1, 2 ** 16, 0, 1)


def kernels():
    """(name, model, compiled): the default TreeLSTM (hoisted leaf tables, node tiles), the
    child-sum TreeLSTM (num_children, inner words) and a recursively unrolled TreeFC."""
    info = cpu_info(make_target("llvm"))
    lstm = ct.models.TreeLSTM(hidden_size=H, vocab_size=V)
    child_sum = ct.models.ChildSumTreeLSTM(H, V, max_children=3)
    fc = ct.models.TreeFC(hidden_size=H, vocab_size=V)
    return [("TreeLSTM", lstm, lstm.compile()),
            ("ChildSumTreeLSTM", child_sum, child_sum.compile()),
            ("TreeFC-unrolled", fc, fc.compile(schedule=lambda rs: derive.derive(rs, info, recursion_depth=2)))]


def bases(compiled):
    trees, _ = ct.data.sst_sample()
    folded = [ct.data.fold_words(t, V) for t in trees[:12]]
    batches = [folded[:1], folded[1:4], folded[4:12], [ct.data.Node(word=3)],
               [ct.data.chain_tree(9, seed=1, vocab_size=V)]]
    return [compiled.linearize(b) for b in batches]


@st.composite
def edits(draw):
    out = []
    for _ in range(draw(st.integers(1, 3))):
        name = draw(st.sampled_from(ARRAYS))
        kind = draw(st.sampled_from(("set", "set", "nudge", "nudge", "swap", "cut", "grow", "dtype")))
        out.append((name, kind, draw(st.integers(0, 1 << 20)), draw(st.integers(0, 1 << 20)),
                    draw(st.one_of(st.integers(-3, 400), st.sampled_from(EXTREMES)))))
    return out


def apply(lin, changes):
    arrays = {name: np.array(getattr(lin, name)) for name in ARRAYS}
    for name, kind, i, j, value in changes:
        a = arrays[name]
        flat = a.reshape(-1)
        if kind == "set" and flat.size:
            flat[i % flat.size] = np.int64(value).astype(flat.dtype)      # wraps, as a C cast would
        elif kind == "nudge" and flat.size:       # near-valid: one element off by -2..2
            flat[i % flat.size] = (flat[i % flat.size].astype(np.int64) + value % 5 - 2).astype(flat.dtype)
        elif kind == "swap" and flat.size:
            x, y = i % flat.size, j % flat.size
            flat[x], flat[y] = flat[y], flat[x]
        elif kind == "cut" and a.shape[0]:
            arrays[name] = a[:i % a.shape[0]]
        elif kind == "grow":
            arrays[name] = np.concatenate([a, a[-1:] if a.shape[0] else a])
        elif kind == "dtype":
            arrays[name] = a.astype((np.int64, np.uint32, np.float32, np.int16)[i % 4])
    return dataclasses.replace(lin, **arrays)


def main(cases: int, progress_path: str):
    built = kernels()
    layouts = [(name, model, compiled, lin) for name, model, compiled in built for lin in bases(compiled)]
    counts = {"cases": 0, "refused": 0, "accepted": 0, "wrong": 0, "compared": 0, "disagree": 0}
    wrong, disagree = [], []
    progress = open(progress_path, "w", buffering=1)

    @settings(max_examples=cases, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    @given(which=st.integers(0, len(layouts) - 1), changes=edits())
    def case(which, changes):
        name, model, compiled, base = layouts[which]
        lin = apply(base, changes)
        counts["cases"] += 1
        progress.write(json.dumps({"case": counts["cases"], "kernel": name, "edits": changes}) + "\n")
        status = compiled.compiled_check_status(lin)
        if status is not None:
            # the compiled check and check_bounds must agree on every array they both read
            try:
                compiled._check_in_numpy(lin)
                valid = True
            except (ValueError, TypeError):
                valid = False
            counts["compared"] += 1
            if (status == 0) != valid:
                counts["disagree"] += 1
                disagree.append({"kernel": name, "edits": changes, "status": status})
        try:
            out, _ = compiled.run(lin)
        except (ValueError, TypeError):
            counts["refused"] += 1
            return
        counts["accepted"] += 1
        want = model.numpy_forward(lin)[0][lin.roots]
        err = float(np.max(np.abs(out - want))) if out.size else 0.0
        if not err <= 1e-4:
            counts["wrong"] += 1
            wrong.append({"kernel": name, "edits": changes, "max_abs_diff": err})

    case()
    print(json.dumps({**counts, "first_wrong": wrong[:3], "first_disagreements": disagree[:3]}))


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2])
