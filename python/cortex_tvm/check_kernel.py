"""The compiled twin of `linearize.check_bounds`: the same invariants as one TIR function,
`cortex_check`, built into every CPU module beside the kernel.

`CompiledModel.run(lin)` validates by default; in numpy that is ten-odd array operations, 26-32
us on a Zen 4, 4-10% of a TreeLSTM H=256 call at batch 1 (docs/safety.md).  The same checks as
scalar loops in compiled code take about 1 us, 5-6 us with the call from Python (1-2%).  The
function only answers "valid" (status 0) or which rule failed (a code: the first group of
rules, in the order below, with a fault); on failure the runtime runs `check_bounds`, which
raises the ValueError that names the array, the slot and the rule.

It reads only what the caller has checked it may read: five int32 arrays whose shapes agree
(children (N, K); num_children and words (N,); level_offsets (L1,) with L1 >= 2; roots (B,)),
and it reads `level_offsets` as bounds only after checking that they start at 1, never
decrease and end at N.  A recursively unrolled kernel's extra rule (a child in its parent's
step is in its parent's chunk) is left to `check_bounds`.
"""
from __future__ import annotations

from tvm.script import tirx as T

from .plan import CHECK_FUNC

#: status codes (0: valid)
LEVELS, NODE_TILE, ROOTS, NUM_CHILDREN, WORDS, LEAF_WORDS, CHILDREN = range(1, 8)


@T.prim_func
def _check(p_children: T.handle, p_num_children: T.handle, p_words: T.handle, p_level_offsets: T.handle,
           p_roots: T.handle, p_status: T.handle, vocab: T.int32, has_no_word: T.int32, no_word: T.int32,
           node_tile: T.int32, leaf_words: T.int32):
    T.func_attr({"global_symbol": "cortex_check", "tirx.noalias": True})
    N = T.int32()
    K = T.int32()
    L1 = T.int32()
    B = T.int32()
    children = T.match_buffer(p_children, (N, K), "int32", align=4)
    num_children = T.match_buffer(p_num_children, (N,), "int32", align=4)
    words = T.match_buffer(p_words, (N,), "int32", align=4)
    level_offsets = T.match_buffer(p_level_offsets, (L1,), "int32", align=4)
    roots = T.match_buffer(p_roots, (B,), "int32", align=4)
    status = T.match_buffer(p_status, (1,), "int32", align=4)
    status[0] = 0
    if level_offsets[0] != 1 or level_offsets[L1 - 1] != N:
        status[0] = 1
    for level in range(L1 - 1):
        if level_offsets[level + 1] < level_offsets[level]:
            status[0] = 1
        elif (level_offsets[level + 1] - level_offsets[level]) % node_tile != 0 and status[0] == 0:
            status[0] = 2
    if status[0] == 0:         # the level offsets are bounds inside [1, N] from here on
        for b in range(B):
            if roots[b] < 0 or roots[b] >= N:
                status[0] = 3
        for s in range(N):
            if num_children[s] < 0 or num_children[s] > K:
                status[0] = 4
            if vocab > 0 and (words[s] < 0 or words[s] >= vocab) and (has_no_word == 0 or words[s] != no_word):
                status[0] = 5
        if leaf_words != 0 and vocab > 0 and status[0] == 0:
            for s in range(level_offsets[0], level_offsets[1]):
                if words[s] < 0 or words[s] >= vocab:
                    status[0] = 6
        if status[0] == 0:
            for level in range(L1 - 1):
                for s in range(level_offsets[level], level_offsets[level + 1]):
                    for j in range(K):
                        if children[s, j] < 0 or children[s, j] >= level_offsets[level]:
                            status[0] = 7


def check_function():
    """The `cortex_check` PrimFunc, named for the module."""
    return _check.with_attr("global_symbol", CHECK_FUNC)
