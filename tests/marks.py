"""Marks shared by the test modules.

``COMPILED_SLOW``: the ``executor`` fixture's two runs, the compiled one with the slow
suites. For tests whose compiled run costs seconds of Numba compiles: the default run
keeps the interpreter's check, and ``.ci/run``'s slow pass compiles them.
"""
import pytest

SLOW_NUMBA = pytest.param("numba", marks=pytest.mark.slow)
COMPILED_SLOW = pytest.mark.parametrize("executor", ["numpy", SLOW_NUMBA], indirect=True)
