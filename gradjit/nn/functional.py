"""``gj.nn.functional``: torch.nn.functional names (re-exports; logic in tracer/nn_*.py)."""
from gradjit.tracer.nn_functional import *  # noqa: F401,F403
from gradjit.tracer.nn_functional import __all__ as _layers
from gradjit.tracer.nn_losses import *  # noqa: F401,F403
from gradjit.tracer.nn_losses import __all__ as _losses

__all__ = list(_layers) + list(_losses)
