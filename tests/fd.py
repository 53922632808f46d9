"""Central finite differences in float64: the oracle for every gradient test."""
import numpy as np


def numerical_grad(f, args, argnum, eps=1e-6):
    """d sum(f(*args)) / d args[argnum] by central differences (f takes/returns arrays)."""
    x = np.asarray(args[argnum], dtype=np.float64)
    g = np.zeros_like(x)
    for idx in np.ndindex(x.shape):
        hi = [np.array(a, dtype=np.float64, copy=True) for a in args]
        lo = [np.array(a, dtype=np.float64, copy=True) for a in args]
        hi[argnum][idx] += eps
        lo[argnum][idx] -= eps
        g[idx] = (np.sum(f(*hi)) - np.sum(f(*lo))) / (2 * eps)
    return g
