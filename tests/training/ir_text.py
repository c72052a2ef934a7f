"""Reading the level pass's TVMScript text in IR tests."""
import re


def after_transposes(text: str) -> str:
    """The function's text after its transposes of the weights (`W_T[c, r] = W[r, c]`), which
    come first, each a parallel loop over tiles of rows (`adjoint_copies.emit_transpose`)."""
    lines = text.splitlines()
    stores = [i for i, line in enumerate(lines) if re.match(r"\s+\w+_T\[.*\] = \w+\[", line)]
    return "\n".join(lines[stores[-1] + 1:] if stores else lines)
