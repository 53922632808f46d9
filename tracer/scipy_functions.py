"""SciPy's Python functions (not ufuncs) on traced values: ``scipy.special.logsumexp``.

Contract
- SciPy's ufuncs (``scipy.special.erf`` ...) reach gradjit through ``__array_ufunc__``
  (tracer/numpy_protocol.py). Its Python functions do not: SciPy's own code runs and meets a
  traced value in a NumPy call gradjit does not trace (``np.result_type``), which named
  SciPy's file. So while a trace runs, the functions listed in ``SCIPY_FUNCTIONS`` are
  swapped in their module (when the caller has imported it: gradjit imports no SciPy) and
  where the user's code bound them (``from scipy.special import logsumexp``), as NumPy's
  functions are (tracer/coercion.py). A call with a traced or tensor argument runs
  gradjit's implementation; any other call goes to SciPy's function untouched.
- ``logsumexp(a, axis=None, b=None, keepdims=False, return_sign=False)``: SciPy's values
  and dtypes (integers and bools computed in float64), ``axis`` None, an int or a tuple,
  ``keepdims``; it is the ``logsumexp`` op (max-shifted log of the sum of exponentials,
  gradient the softmax). ``b`` and ``return_sign=True`` raise ``UnsupportedError`` naming
  the function and the user's line.
- ``scipy.linalg``'s functions (``expm``, ``solve_triangular``, ``inv`` ...) on a traced
  value raise ``UnsupportedError`` naming the function (and NumPy's or gradjit's
  traced equivalent where there is one), not an error from inside SciPy.
"""
from __future__ import annotations

import numpy as np
from numpy.lib.array_utils import normalize_axis_tuple

from gradjit.tracer.api import ArrayOps
from gradjit.tracer.methods_reduce import ReduceMethods
from gradjit.tracer.numpy_args import unsupported


def logsumexp(a, axis=None, b=None, keepdims=False, return_sign=False):
    if b is not None or return_sign:
        unsupported(f"scipy.special.logsumexp(..., {'b=...' if b is not None else 'return_sign=True'})")
    if np.dtype(a.dtype).kind != "f":
        a = ArrayOps.to(a, np.float64)
    dims = tuple(range(a.ndim)) if axis is None else normalize_axis_tuple(axis, a.ndim)
    if not dims:   # (axis=() reduces nothing: log(exp(a)) is a)
        return a._copy() if hasattr(a, "_copy") else a
    return ReduceMethods.logsumexp(a, dims, keepdims)


def _refused(name, hint):
    """scipy.linalg.<name>: SciPy's own code would meet the traced value in a NumPy call
    gradjit does not trace (expm: "'Tracer' object has no attribute 'flags'"); refuse it
    by name instead, with the traced equivalent where there is one."""
    def refuse(*args, **kwargs):
        unsupported(f"scipy.linalg.{name}" + (f" (use {hint})" if hint else ""))
    refuse.__name__ = name
    return refuse


_SCIPY_LINALG = {
    "expm": None, "logm": None, "sqrtm": None, "funm": None, "expm_frechet": None,
    "schur": None, "eig": None, "eigvals": None, "lu": None, "lu_factor": None,
    "lu_solve": None, "cho_factor": None, "cho_solve": "gj.linalg.cholesky_solve",
    "solve_triangular": "gj.linalg.solve_triangular", "inv": "np.linalg.inv",
    "det": "np.linalg.det", "solve": "np.linalg.solve", "cholesky": "np.linalg.cholesky",
    "eigh": "np.linalg.eigh", "svd": "np.linalg.svd", "qr": "np.linalg.qr",
    "pinv": "np.linalg.pinv", "lstsq": "np.linalg.lstsq", "norm": "np.linalg.norm"}

# (module, name, gradjit's implementation): the functions a trace swaps; SCIPY_REFUSED
# too, which are not traced (they raise naming themselves)
SCIPY_FUNCTIONS = [("scipy.special", "logsumexp", logsumexp)]
SCIPY_REFUSED = [("scipy.linalg", name, _refused(name, hint))
                 for name, hint in _SCIPY_LINALG.items()]
