"""gradjit's changes to Numba (runtime/numba_patches.py): swapped in for a compile only, and
behind one switch whose off position gives the same numbers."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from numba.core import config as numba_config
from numba.core import pythonapi, types
from numba.core.codegen import CPUCodeLibrary, JITCodeLibrary

import gradjit as gj
from gradjit.runtime import compiler, levels, links, numba_patches

HERE = os.path.dirname(__file__)


def _numba_state():
    """What gradjit may change of Numba, as identities (and the optimisation level)."""
    return dict(vars(CPUCodeLibrary)), dict(vars(JITCodeLibrary)), numba_config.OPT


def _array_boxer():   # (Numba registers its boxers during its first compile)
    return getattr(getattr(pythonapi, "_boxers", None), "functions", {}).get(types.Array)


def test_numba_is_as_shipped_outside_a_compile(monkeypatch):
    before = _numba_state()
    seen = []

    def spy(self):   # runs while Numba finalises a library inside the block
        seen.append(CPUCodeLibrary.finalize is spy)
        return links._finalize(self)

    monkeypatch.setattr(links, "SWAPS", ((CPUCodeLibrary, "finalize", spy),))
    blocks, compiles = numba_patches.STATS["blocks"], compiler.STATS["compiles"]
    f = gj.jit(lambda a, b: np.tanh(a @ b).sum(axis=0) * 3.25 - np.cosh(a).mean())
    r = np.random.default_rng(1)
    a, b = r.standard_normal((11, 5)), r.standard_normal((5, 9))
    np.testing.assert_allclose(f(a, b), np.tanh(a @ b).sum(axis=0) * 3.25 - np.cosh(a).mean())
    assert compiler.STATS["compiles"] > compiles and numba_patches.STATS["blocks"] > blocks
    assert seen and all(seen)           # in the block: gradjit's stand-in
    assert _numba_state() == before     # after it: Numba's own, nothing left behind
    assert _array_boxer().__module__ == "numba.core.boxing"


def test_a_nested_block_keeps_the_outer_swaps():
    own = CPUCodeLibrary.__dict__["finalize"]
    with numba_patches._methods_swapped():
        with numba_patches._methods_swapped():
            pass
        assert CPUCodeLibrary.finalize is links._finalize
    assert CPUCodeLibrary.__dict__["finalize"] is own
    assert vars(JITCodeLibrary).get("_finalize_specific", levels._ORIGINAL) is levels._ORIGINAL


def _child(tmp_path, name, switch):
    env = dict(os.environ, GRADJIT_CACHE_DIR=str(tmp_path / f"cache-{name}"),
               GRADJIT_TIERING="sync", GRADJIT_NUMBA_PATCHES=switch)
    env.pop("GRADJIT_TEST_CACHE_MADE", None)
    out = tmp_path / f"{name}.npz"
    run = subprocess.run([sys.executable, os.path.join(HERE, "numba_patches_child.py"), str(out)],
                         env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    return dict(np.load(out))


@pytest.mark.slow
def test_switched_off_gives_the_same_numbers(tmp_path):
    on, off = _child(tmp_path, "on", "1"), _child(tmp_path, "off", "0")
    assert on["blocks"] > 0 and off["blocks"] == 0
    assert on["compiles"] > 0 and off["compiles"] > 0
    assert sorted(on) == sorted(off)
    for key in on:
        if key not in ("blocks", "compiles"):
            np.testing.assert_array_equal(on[key], off[key], err_msg=key)


def _sorts_and_copies(x):   # compiled code calling np.argsort, np.copy and np.tril
    s = np.sort(x, axis=-1)
    y = x.copy()
    y[0] = 0.0
    return (s * np.tril(np.outer(x[0], x[0]))[0]).sum() + (y ** 2).sum()


@pytest.mark.slow   # (fresh processes: CI's slow suite runs it)
def test_numba_types_numpys_functions_while_a_trace_runs():
    """While a trace runs, np.copy & co. are gradjit's stand-ins in NumPy's namespace, for
    every thread. A compile meanwhile (gradjit's background tier, the user's @njit code)
    must still type them as NumPy's own: it failed, and the structure stayed interpreted."""
    import numba

    from gradjit.tracer.coercion import swapped
    from gradjit.tracer.hooks import Stand

    x = np.random.default_rng(3).standard_normal((3, 5))
    want = gj.grad(_sorts_and_copies)(x)
    compiles = compiler.STATS["compiles"]
    # (the stand-ins in place as while another thread traces: a transform called in this
    # thread is no part of that trace, and compiles its own structure)
    with swapped():
        assert isinstance(np.copy, Stand) and isinstance(np.argsort, Stand)

        @numba.njit
        def user(v):
            w = np.empty(v.shape)
            w[:] = np.copy(v)
            return np.tril(np.outer(w, w)).sum() + np.argsort(v)[0]

        assert user(x[0]) == pytest.approx(np.tril(np.outer(x[0], x[0])).sum()
                                           + np.argsort(x[0])[0], rel=1e-12)
        got = gj.grad(_sorts_and_copies)(x[:, :4].copy())   # a new structure, compiled here
    assert compiler.STATS["compiles"] > compiles
    np.testing.assert_allclose(got, gj.grad(_sorts_and_copies)(x[:, :4].copy()))
    np.testing.assert_allclose(want, gj.grad(_sorts_and_copies)(x))
    assert not isinstance(np.copy, Stand)


@pytest.mark.slow   # (fresh processes: CI's slow suite runs it)
def test_a_first_compile_and_imports_during_a_trace_leave_numpy_as_numba_knows_it(tmp_path):
    """A process whose first Numba compile (Numba imports its NumPy implementations then)
    and first import of numpy.ma and SciPy happen while a trace runs: every NumPy function
    still compiles afterwards, and the imports see NumPy's names."""
    env = dict(os.environ, GRADJIT_CACHE_DIR=str(tmp_path / "cache"), GRADJIT_TIERING="sync")
    env.pop("GRADJIT_TEST_CACHE_MADE", None)
    run = subprocess.run([sys.executable, os.path.join(HERE, "numba_in_trace_child.py")],
                         env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.split() == ["True", "True"]
