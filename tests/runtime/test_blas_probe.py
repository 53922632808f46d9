"""Numba's import-time BLAS probe does not import scipy.linalg (runtime/blas_probe.py):
a first gradient without a BLAS call leaves it unimported; BLAS still works after.

Each case runs in a fresh process: the probe acts once, at a process's first compile.
"""
import json
import os
import subprocess
import sys
import textwrap

import pytest

from gradjit.runtime import blas_probe

_HEAD = textwrap.dedent("""
    import json, sys, numpy as np, numba, gradjit as gj
    from gradjit.runtime import blas_probe
    rng = np.random.default_rng(0)
    def rnn(Wx, Wh, b, h, *xs):
        for x in xs:
            h = np.tanh(x @ Wx + h @ Wh + b)
        return (h * h).sum()
    def lsq(X, w):
        return ((X @ w) ** 2).sum()
    def linalg_state():
        from numba.np import arraymath, linalg
        return {"scipy_linalg": "scipy.linalg" in sys.modules, "have_blas": arraymath._HAVE_BLAS,
                "restored": arraymath.ensure_blas is linalg.ensure_blas
                            and linalg.ensure_blas.__module__ == "numba.np.linalg"}
    rnn_args = [rng.normal(size=(3, 4)), rng.normal(size=(4, 4)), rng.normal(size=4),
                rng.normal(size=(1, 4))] + [rng.normal(size=(1, 3)) for _ in range(5)]
    X, w = rng.normal(size=(80, 70)), rng.normal(size=(70, 60))
""")

_TAIL = textwrap.dedent("""
    state = linalg_state()
    g = gj.grad(lsq, argnums=1)(X, w)
    state["lsq_ok"] = bool(np.allclose(g, 2 * X.T @ (X @ w), rtol=1e-12, atol=1e-10))
    state["njit_dot_ok"] = bool(np.allclose(numba.njit(lambda a, b: np.dot(a, b))(X, w), X @ w))
    print(json.dumps(state))
""")


def _child(tmp_path, body):
    env = dict(os.environ, GRADJIT_CACHE_DIR=str(tmp_path))
    for k in ("GRADJIT_EXECUTOR", "NUMBA_OPT"):
        env.pop(k, None)
    out = subprocess.run([sys.executable, "-c", _HEAD + textwrap.dedent(body) + _TAIL], env=env,
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.slow   # (fresh processes: CI's slow suite runs it)
def test_a_first_gradient_without_blas_leaves_scipy_linalg_unimported(tmp_path):
    got = _child(tmp_path, """
        gj.grad(rnn, argnums=(0, 1, 2))(*rnn_args)
        state0 = linalg_state()
        assert not state0["scipy_linalg"], state0   # (its products are smm loops)
        assert state0["have_blas"] and state0["restored"], state0
    """)
    assert got["scipy_linalg"] is False   # (read before the BLAS gradient)
    assert got["lsq_ok"] and got["njit_dot_ok"]
    assert got["have_blas"] and got["restored"]


@pytest.mark.slow   # (fresh processes: CI's slow suite runs it)
def test_a_users_earlier_compile_keeps_numbas_own_probe(tmp_path):
    got = _child(tmp_path, """
        numba.njit(lambda x: x + 1)(1.0)   # Numba imports arraymath itself, with SciPy
        assert "scipy.linalg" in sys.modules
        gj.grad(rnn, argnums=(0, 1, 2))(*rnn_args)
    """)
    assert got["scipy_linalg"] and got["have_blas"] and got["restored"]
    assert got["lsq_ok"] and got["njit_dot_ok"]


@pytest.mark.slow   # (fresh processes: CI's slow suite runs it)
def test_without_cython_blas_on_disk_numbas_probe_decides(tmp_path):
    got = _child(tmp_path, """
        blas_probe._cython_blas_on_disk = lambda: False
        gj.grad(rnn, argnums=(0, 1, 2))(*rnn_args)
        assert "scipy.linalg.cython_blas" in sys.modules   # (Numba's probe imported it)
    """)
    assert got["have_blas"] and got["restored"] and got["lsq_ok"]


def test_scipys_cython_blas_is_found_on_disk():
    import scipy.linalg.cython_blas as cb
    assert blas_probe._cython_blas_on_disk()
    assert os.path.isfile(cb.__file__)
