"""``gj.nn.functional``: torch.nn.functional names (re-exports; logic in tracer/nn_*.py)."""
from gradjit.tracer.nn_functional import *  # noqa: F401,F403
from gradjit.tracer.nn_functional import __all__ as _layers
from gradjit.tracer.nn_losses import *  # noqa: F401,F403
from gradjit.tracer.nn_losses import __all__ as _losses
from gradjit.tracer.nn_layers import *  # noqa: F401,F403
from gradjit.tracer.nn_layers import __all__ as _nn_layers

__all__ = list(_layers) + list(_losses) + list(_nn_layers)
from gradjit.tracer.methods_scatter import pad  # noqa: E402,F401  (tracer/methods_scatter.py)

__all__.append("pad")
