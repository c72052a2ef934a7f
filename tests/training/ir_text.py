"""Reading the level pass's TVMScript text in IR tests."""
import re


def after_transposes(text: str) -> str:
    """The function's text after its copies of the weights (`W_T[p, c, l] = W[r, c]`, `W_panels[p, r, l] =
    W[r, c]`: `adjoint_copies`), which come first, each a parallel loop (`emit_transpose`, `emit_widen`)."""
    lines = text.splitlines()
    stores = [i for i, line in enumerate(lines) if re.match(r"\s+\w+_(T|panels)\[.*\] = \w+\[", line)]
    return "\n".join(lines[stores[-1] + 1:] if stores else lines)
