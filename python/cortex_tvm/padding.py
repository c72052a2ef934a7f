"""Deprecated: the padding policy moved to `cortex_tvm.policy.padding` (issue 22: the policy
apart from the mechanism).  Importing this module warns and gives the same names."""
import warnings

from .policy.padding import (MAX_WASTE, SIZE_ATTRS, Padding, ProgramFacts, compiled_form,  # noqa: F401
                             internal_middles, pad_multiple, padded, padded_gemms, padded_model, padding_of,
                             program_facts)

warnings.warn("cortex_tvm.padding is deprecated; import cortex_tvm.policy.padding", DeprecationWarning,
              stacklevel=2)
