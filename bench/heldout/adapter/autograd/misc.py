"""autograd.misc: ``flatten`` is gradjit's ``ravel_pytree`` (same contract: a flat vector and
an unflatten function); ``const_graph`` is an adapter limitation."""
import gradjit as _gj
from .adapter_limits import const_graph  # noqa: F401


def flatten(value):
    return _gj.ravel_pytree(value)
