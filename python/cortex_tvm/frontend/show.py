"""The RA program as text: each stage's computes, one equation each, producers first.

Works for any `ra.RecProgram` (traced or hand-written): each compute body is
evaluated on named symbols, the current node being `n`, so the text reads
like the RA source, `internal_h[i] = T.sigmoid(gates[n, 3, i]) * ...`.
"""
from __future__ import annotations

from tvm import tirx

from .. import ra

_INDEX_NAMES = ("i",), ("g", "i"), ("g", "i", "k")


def ra_text(program: ra.RecProgram) -> str:
    """One line per state and per compute of each case (leaf, internal).

    Example::

        print(ct.frontend.ra_text(ct.models.TreeFC(16, 50).program))
        # states: h(16,)
        # leaf:
        #   leaf_h[i] = emb[word[n], i]
        # internal: ...
    """
    lines = ["states: " + ", ".join(f"{s.name}{s.shape}" for s in program.states)]
    for case, computes in (("leaf", program.leaf), ("internal", program.internal)):
        lines.append(f"{case}:")
        lines += _case_lines(program, [computes[s] for s in program.states])
    return "\n".join(lines)


class _Symbol:
    """A named input read like a TE tensor (IterVars allowed as indices)."""

    def __init__(self, name, shape, dtype):
        self.buffer = tirx.decl_buffer(shape, dtype, name=name)

    def __getitem__(self, idx):
        idx = idx if isinstance(idx, tuple) else (idx,)
        return self.buffer[tuple(getattr(i, "var", i) for i in idx)]


class _Symbols(dict):
    """RA inputs -> named symbols, made on first read."""

    def __missing__(self, key):
        if key in ("children", "num_children"):
            symbol = _Symbol(key, (1, 1), "int32")
        elif isinstance(key, ra.NodeInput):
            symbol = _Symbol(key.name, (1,), "int32")
        elif isinstance(key, ra.RecState):
            symbol = _Symbol(key.name, (1,) + key.shape, key.dtype)
        elif isinstance(key, ra.NodeFeatures):
            symbol = _Symbol(key.name, (1, key.size), key.dtype)
        else:
            symbol = _Symbol(key.name, key.shape, key.dtype)
        self[key] = symbol
        return symbol


def _case_lines(program, outputs) -> list:
    n = tirx.Var("n", "int32")
    lines = []
    binding = ra.Binding(node=n, position=n, tensors={}, placeholders=_Symbols())

    def instantiate(compute):
        idx = [tirx.Var(v, "int32") for v in _INDEX_NAMES[min(len(compute.shape), 3) - 1]]
        body = compute.fcompute(*idx)          # producers it reads are instantiated (listed) first
        lines.append(f"  {compute.name}[{', '.join(map(str, idx))}] = {_text(body)}")
        return _Symbol(compute.name, (1,) + compute.shape, "float32")

    binding.instantiate = instantiate
    with ra.binding(binding):
        for compute in outputs:
            if compute not in binding.tensors:
                binding.tensors[compute] = instantiate(compute)
    return lines


_INFIX = {"Add": ("+", 1), "Sub": ("-", 1), "Mul": ("*", 2), "Div": ("/", 2), "FloorDiv": ("//", 2),
          "FloorMod": ("%", 2), "LT": ("<", 0)}


def _text(e, parent: int = 0) -> str:
    """A compact infix form of a TIR expression (TVMScript prints reductions at length)."""
    kind = type(e).__name__
    if kind in _INFIX:
        symbol, rank = _INFIX[kind]
        right_rank = rank + 1 if kind in ("Sub", "Div", "FloorDiv", "FloorMod") else rank
        text = f"{_text(e.a, rank)} {symbol} {_text(e.b, right_rank)}"
        return f"({text})" if rank < parent else text
    if kind == "Reduce":
        axes = ", ".join(f"{ax.var.name}<{ax.dom.extent}" for ax in e.axis)
        return f"sum[{axes}]({_text(e.source[0])})"
    if kind == "TensorLoad":
        return f"{e.source.name}[{', '.join(_text(i) for i in e.indices)}]"
    if kind == "Call":
        return f"{e.op.name.split('.')[-1]}({', '.join(_text(a) for a in e.args)})"
    if kind in ("Max", "Min"):
        return f"{kind.lower()}({_text(e.a)}, {_text(e.b)})"
    if kind in ("IntImm", "FloatImm"):
        return f"{e.value:g}" if kind == "FloatImm" else str(e.value)
    return str(e)
