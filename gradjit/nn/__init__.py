"""``gj.nn``: torch.nn-shaped namespace (thin facade, no logic)."""
from gradjit.nn import functional

__all__ = ["functional"]
