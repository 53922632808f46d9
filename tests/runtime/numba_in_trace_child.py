"""Child of test_numba_patches.py: a fresh process whose first Numba compile and first
imports of numpy.ma / SciPy happen while a trace has NumPy's stand-ins in place."""
import sys

import numba
import numpy as np

import gradjit as gj
from gradjit.tracer.coercion import traced_numpy
from gradjit.tracer.hooks import Stand
from gradjit.tracer.ir import Graph

ones = np.ones(3)
with traced_numpy(Graph("outer")):
    assert isinstance(np.tril, Stand) and np.tril.__qualname__ == "tril"
    assert isinstance(np.random.normal, Stand)
    import numpy.ma  # noqa: F401  (reads np.angle.__qualname__ at import)
    import scipy.special  # noqa: F401

    @numba.njit
    def first(v):   # the process's first compile, inside the trace
        np.random.seed(1)
        return v.sum() + np.random.normal()

    assert first(ones) == first(ones)   # (Numba's own stream, reseeded: np.random.seed typed)   # (np.ones here would make a traced buffer: this thread traces)


@numba.njit
def later(v):   # after the trace: NumPy's functions are still Numba's
    np.random.seed(0)
    return np.tril(np.outer(v, v)).sum() + np.argsort(v)[0] + np.random.normal()


print(np.isfinite(later(np.array([3.0, 1.0, 2.0]))))
g = gj.grad(lambda x: (np.tril(np.outer(x, x)) * np.sort(x)).sum())(np.array([3.0, 1.0, 2.0]))
print(np.all(np.isfinite(g)))
sys.exit(0)
