"""The lowering tests: a package, for `from .common import ...` and fixtures lowered once (conftest)."""
