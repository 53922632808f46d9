"""Compiled code held in memory is bounded (runtime/memory.py): least recently used entries
go, their code leaves Numba's JIT once nothing holds it, and results stay right.

Counters, live objects and exit codes; the one memory figure is checked against a bound
four times what was measured (0.34 MiB per compiled program beyond the bound)."""
import gc
import os

import numpy as np
import pytest

import gradjit as gj
from gradjit.runtime import compiler, memory

pytestmark = pytest.mark.slow   # (pyproject.toml: the default run skips it; CI runs it)


def _program(k):
    def f(w):
        return (np.sin(w * k) * np.tanh(w) + w ** 3).sum()
    return f


def _want(k, w):
    return k * np.cos(w * k) * np.tanh(w) + np.sin(w * k) / np.cosh(w) ** 2 + 3 * w ** 2


@pytest.fixture
def small_bound():
    old = gj.cache_size(3)
    yield 3
    gj.cache_size(old)


def _live_generated():
    from numba.core.registry import CPUDispatcher
    gc.collect()
    return sum(1 for o in gc.get_objects() if type(o) is CPUDispatcher
               and o.py_func.__module__.startswith("gradjit_gen_"))


def test_tables_stay_bounded_and_results_right(small_bound):
    w = np.linspace(-1, 1, 6)
    before = gj.stats()["evictions"]
    held = gj.grad(_program(2.0))   # (a transform the user keeps)
    np.testing.assert_allclose(held(w), _want(2.0, w), rtol=1e-12)
    for n in range(7, 14):   # seven more structures (another length each): beyond the bound
        x = np.linspace(-1, 1, n)
        np.testing.assert_allclose(gj.grad(_program(1.5))(x), _want(1.5, x), rtol=1e-12)
    assert gj.stats()["evictions"] - before >= 5
    assert len(compiler._LOADED) <= small_bound
    # the kept transform still runs (its code is alive while it holds it), and again after
    # everything is cleared
    np.testing.assert_allclose(held(w + 0.5), _want(2.0, w + 0.5), rtol=1e-12)
    gj.clear_cache()
    assert len(compiler._LOADED) == 0
    np.testing.assert_allclose(held(w), _want(2.0, w), rtol=1e-12)
    np.testing.assert_allclose(gj.grad(_program(2.0))(w), _want(2.0, w), rtol=1e-12)


def test_evicted_code_dies_when_nothing_holds_it(small_bound):
    gj.clear_cache()
    base = _live_generated()
    for n in range(20, 27):
        x = np.linspace(-1, 1, n)
        gj.grad(_program(0.5))(x)
    memory.unload_pending()
    assert _live_generated() - base <= small_bound + 1


def test_evicted_sources_leave_linecache(small_bound, monkeypatch, tmp_path):
    # Numba reads a module's lines under the absolute path and relative to the cwd: an
    # evicted module's lines must go under both keys, or every structure leaves its text.
    import linecache
    monkeypatch.chdir(os.environ["GRADJIT_CACHE_DIR"])
    gj.clear_cache()
    for n in range(30, 38):
        gj.grad(_program(0.25))(np.linspace(-1, 1, n))
    memory.unload_pending()
    held = [k for k in linecache.cache if isinstance(k, str) and "gj_" in k]
    assert len(held) <= 2 * (small_bound + 1)


def test_tensor_mode_steps_stay_right_beyond_the_bound(small_bound):
    for n in list(range(3, 8)) * 2:   # five structures, twice: evicted, then built again
        x = np.linspace(-1, 1, n)
        t = gj.tensor(x, requires_grad=True)
        (np.sin(t * 2.0) * np.tanh(t) + t ** 3).sum().backward()
        np.testing.assert_allclose(t.grad.data, _want(2.0, x), rtol=1e-12)


def test_cache_size_is_checked():
    with pytest.raises(ValueError, match="cache_size"):
        gj.cache_size(0)


def _bench():
    """bench/cache_memory.py, which measures the same in the bench (one child script)."""
    import importlib.util
    path = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(__file__))), "bench",
                        "cache_memory.py")
    spec = importlib.util.spec_from_file_location("gj_bench_cache_memory", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="reads /proc")
def test_memory_per_structure_beyond_the_bound(tmp_path):
    got = _bench().measure(5, 25, str(tmp_path), warm=10)
    assert got["compiles"] == 35 and got["evictions"] >= 60
    assert got["per_mib"] <= 1.4, got   # (unbounded, before: 2.5 MiB per structure)


def test_clearing_a_disk_cache_that_was_deleted_meanwhile(monkeypatch, tmp_path):
    # (gj.clear_cache(disk=True) raised FileNotFoundError from listing the dir)
    import shutil
    monkeypatch.setenv("GRADJIT_CACHE_DIR", str(tmp_path / "cache"))
    gj.clear_cache()
    try:
        gj.grad(lambda x: (x * x).sum())(np.ones(2))
        shutil.rmtree(tmp_path / "cache")
        gj.clear_cache(disk=True)
        np.testing.assert_allclose(gj.grad(lambda x: (x ** 3).sum())(np.ones(2)), [3.0, 3.0])
    finally:
        monkeypatch.undo()
        gj.clear_cache()
