"""Numba's one-time BLAS probe without importing ``scipy.linalg``.

Contract
- ``prepare()``: call before gradjit asks Numba to compile, and before a trace puts
  stand-ins into NumPy's namespace (``HOOKS.numba_ready``, tracer/coercion.py). The first time, if
  Numba's ``numba.np.arraymath`` is not imported yet, it is imported here with a
  BLAS probe that checks SciPy's ``cython_blas`` extension is on disk (and Numba's
  LAPACK integer-width guard) instead of importing ``scipy.linalg``. Everything else
  is Numba's: code that uses BLAS still calls Numba's ``ensure_blas`` when it is
  compiled (which imports ``scipy.linalg.cython_blas`` and fails clearly if it
  cannot), and Numba's C helpers import it when a BLAS call first runs (code loaded
  from the disk cache is not compiled).
- Where Numba's layout differs, or arraymath is already imported (the user's own
  ``@njit`` code compiled first), nothing changes.
- It also imports Numba's implementations of ``np.random`` (``numba.np.random.legacy``
  and the Generator modules): they read ``np.random.<name>`` when imported, which
  must be NumPy's function, not a trace's stand-in (tracer/coercion.py).

Why: ``numba.np.arraymath`` asks at import time whether BLAS is available, by
importing ``scipy.linalg.cython_blas``; that runs ``scipy.linalg``'s package
``__init__`` (LAPACK wrappers, SciPy's array-API layer, which imports
``numpy.f2py`` and ``numpy.testing``): about 0.1 s of every process's first
compile. The RNN benchmark's cold first gradient, which calls no BLAS (its products
are ``blas_cpu.smm`` loops), went from 0.873 to 0.766 s (medians of 6 alternating
fresh processes). Numba imports arraymath during the
registry refresh of its first compile, so without this the first gradient of any
function pays for SciPy's linear algebra whether it uses it or not.
"""
from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys

from numba.core.compiler_lock import global_compiler_lock

_DONE = [False]


def _cython_blas_on_disk():
    """True when scipy/linalg holds a cython_blas extension module importable here."""
    spec = importlib.util.find_spec("scipy")
    for root in (spec.submodule_search_locations or []) if spec else []:
        for suffix in importlib.machinery.EXTENSION_SUFFIXES:
            if os.path.isfile(os.path.join(root, "linalg", "cython_blas" + suffix)):
                return True
    return False


def prepare():
    """Import ``numba.np.arraymath`` with the on-disk probe (once; see the contract)."""
    if _DONE[0]:
        return
    # Numba compiles (and imports arraymath) under this lock: no other thread's compile
    # can call ensure_blas while the probe stands in for it.
    with global_compiler_lock:
        if not _DONE[0]:
            _DONE[0] = True
            if "numba.np.arraymath" not in sys.modules:
                _import_arraymath()
            for name in ("numba.np.random.legacy", "numba.np.random.generator_methods"):
                try:
                    importlib.import_module(name)
                except ImportError:   # another Numba layout: its own modules
                    pass


def _import_arraymath():
    try:
        from numba.np import linalg
        original, check_width = linalg.ensure_blas, linalg._check_lapack_int_width
    except (ImportError, AttributeError):   # another Numba layout: its own probe runs
        return

    def probe():
        if not _cython_blas_on_disk():
            original()   # (raises Numba's ImportError, or imports a SciPy laid out otherwise)
            return
        check_width()

    linalg.ensure_blas = probe
    try:
        from numba.np import arraymath
    finally:
        linalg.ensure_blas = original
    if getattr(arraymath, "ensure_blas", None) is probe:
        arraymath.ensure_blas = original
