"""gradjit does not import SciPy's special or linalg modules until it needs them
(tracer/lazy_scipy.py), and scipy.special's ufuncs still trace once the caller imports it."""
import math
import subprocess
import sys

import numpy as np
import pytest

import gradjit as gj
from gradjit.tracer.numpy_protocol import UnsupportedError


def test_import_gradjit_leaves_scipy_special_and_linalg_unimported():
    code = ("import sys, gradjit\n"
            "print(sorted(m for m in ('scipy.special', 'scipy.linalg') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip().splitlines()[-1]
    assert out == "[]"


def test_reference_implementations_import_scipy_when_called():
    from gradjit.tracer import lazy_scipy
    erf = lazy_scipy.special("erf")
    assert erf.__name__ == "erf"
    assert erf(0.5) == pytest.approx(math.erf(0.5), rel=1e-15)
    assert "scipy.special" in sys.modules


def test_scipy_special_ufuncs_trace_on_tensors_and_in_grad():
    from scipy import special
    x0 = np.array([0.3, -0.2, 1.1])
    x = gj.tensor(x0, requires_grad=True)
    special.erf(x).sum().backward()
    np.testing.assert_allclose(x.grad, 2 / math.sqrt(math.pi) * np.exp(-x0 ** 2), rtol=1e-13)
    g = gj.grad(lambda v: special.expit(v).sum())(x0)
    s = 1 / (1 + np.exp(-x0))
    np.testing.assert_allclose(g, s * (1 - s), rtol=1e-13)
    y0 = np.array([0.5, 2.0, 3.0])
    g = gj.grad(lambda v: special.xlogy(v, y0).sum())(x0)
    np.testing.assert_allclose(g, np.log(y0), rtol=1e-13)


def test_an_unsupported_scipy_ufunc_points_to_the_supported_list():
    from scipy import special
    supported = r"scipy\.special\.gamma is not supported.*README's section"
    with pytest.raises(UnsupportedError, match=supported):
        special.gamma(gj.tensor(np.array([1.5]), requires_grad=True))
