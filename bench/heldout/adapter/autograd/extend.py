"""autograd.extend: defining new primitives has no gradjit equivalent; every name skips
the test as an adapter limitation (adapter_limits.py)."""
from .adapter_limits import primitive, defvjp, defjvp  # noqa: F401
