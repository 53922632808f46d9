"""Tiered execution (runtime/tiers.py): a new structure's first calls run on the NumPy
interpreter while Numba compiles it in a background thread; the compiled code takes
over when ready. Both tiers give the same results. The compile is held at a gate here,
so which tier serves a call is decided by the test, not by timing."""
import logging
import threading
import time

import numba
import numpy as np
import pytest

import gradjit as gj
from gradjit.runtime import compiler, tiers


@pytest.fixture
def gated(monkeypatch):
    """Background tiering, with every background compile waiting for ``gate.set()``."""
    gate = threading.Event()
    real = compiler._compile_in_background

    def held(graph):
        assert gate.wait(60), "the test never opened the gate"
        return real(graph)
    monkeypatch.setattr(compiler, "_compile_in_background", held)
    gj.set_tiering("background")
    yield gate
    gate.set()
    gj.wait_compiled(60)
    gj.set_tiering(None)


def _loss(w, x):
    return (np.tanh(x @ w) ** 2).sum() + (w * w).sum() * 0.37


def test_first_calls_interpreted_then_compiled_same_results(gated, rng):
    w, x = rng.standard_normal((5, 3)), rng.standard_normal((11, 5))
    g = gj.grad(_loss)
    before = dict(gj.stats())
    first = g(w, x)
    second = g(w, x)
    st = gj.stats()
    assert st["interpreted_calls"] - before["interpreted_calls"] == 2
    assert st["background_compiles"] - before["background_compiles"] == 1
    gated.set()
    assert gj.wait_compiled(60)
    third = g(w, x)                         # settles the entry on the compiled code
    fourth = g(w, x)                        # the hot path
    assert gj.stats()["interpreted_calls"] == st["interpreted_calls"]
    assert g._hot is not None
    for r in (second, third, fourth):
        np.testing.assert_allclose(r, first, rtol=1e-12, atol=1e-14)
    gj.set_tiering("sync")
    np.testing.assert_allclose(gj.grad(_loss)(w, x), first, rtol=1e-12, atol=1e-14)


def test_tensor_backward_tiers(gated, rng):
    a = rng.standard_normal((4, 6))
    t = gj.from_numpy(a.copy()).requires_grad_()
    grads = []
    for _ in range(2):
        t.grad = None
        (np.sin(t) * t * 0.61).sum().backward()
        grads.append(np.array(t.grad))
    assert gj.stats()["interpreted_calls"] >= 2
    gated.set()
    gj.wait_compiled(60)
    fast = gj.stats()["fast_steps"]
    for _ in range(3):
        t.grad = None
        (np.sin(t) * t * 0.61).sum().backward()
        grads.append(np.array(t.grad))
    assert gj.stats()["fast_steps"] > fast     # registered once compiled: the fast path
    want = (np.cos(a) * a + np.sin(a)) * 0.61
    for g in grads:
        np.testing.assert_allclose(g, want, rtol=1e-12, atol=1e-14)


def test_a_failed_compile_stays_on_the_interpreter_with_a_warning(monkeypatch, caplog, rng):
    def broken(graph):
        raise RuntimeError("simulated compiler failure")
    monkeypatch.setattr(compiler, "_compile_in_background", broken)
    gj.set_tiering("background")
    try:
        with caplog.at_level(logging.INFO, logger="gradjit"):
            f = gj.jit(lambda x: np.exp(x * 0.4321).sum(axis=0))
            x = rng.standard_normal((3, 9))
            got = [f(x)]
            gj.wait_compiled(60)
            got.append(f(x))
    finally:
        gj.set_tiering(None)
    for r in got:
        np.testing.assert_allclose(r, np.exp(x * 0.4321).sum(axis=0), rtol=1e-12)
    msgs = [r.getMessage() for r in caplog.records if r.name == "gradjit"]
    assert any("in the background" in m for m in msgs)
    assert any("failed" in m and "simulated compiler failure" in m and "interpreter" in m
               for m in msgs)


def test_logging_when_a_compile_starts_and_ends(caplog, rng):
    gj.set_tiering("background")
    try:
        with caplog.at_level(logging.INFO, logger="gradjit"):
            gj.jit(lambda x: (x * 0.2468 + 1).max())(rng.standard_normal(17))
            assert gj.wait_compiled(120)
    finally:
        gj.set_tiering(None)
    msgs = [r.getMessage() for r in caplog.records if r.name == "gradjit"]
    assert any("compiling" in m and "in the background" in m for m in msgs)
    assert any(m.startswith("gradjit: compiled") and "takes over" in m for m in msgs)


def test_never_stays_interpreted_and_compiles_nothing(rng):
    gj.set_tiering("never")
    try:
        before = gj.stats()
        x = rng.standard_normal(8)
        r = gj.grad(lambda x: (np.cos(x) * 0.9753).sum())(x)
        assert gj.stats()["compiles"] == before["compiles"]
        assert gj.stats()["disk_hits"] == before["disk_hits"]
    finally:
        gj.set_tiering(None)
    np.testing.assert_allclose(r, -np.sin(x) * 0.9753, rtol=1e-12)


def test_a_structure_whose_source_is_on_disk_loads_without_tiering(rng):
    x = rng.standard_normal(6)
    f = (lambda x: (x ** 2 * 0.1357).sum())
    gj.grad(f)(x)                              # (sync, the suite's default): on disk now
    gj.set_tiering("background")
    try:
        before = gj.stats()["background_compiles"]
        gj.grad(f)(x)                          # a new transform object, same structure
        assert gj.stats()["background_compiles"] == before
    finally:
        gj.set_tiering(None)


def test_compile_for_and_njit_callers_wait_for_the_compiled_code(gated, rng):
    x = rng.standard_normal(13)
    g = gj.grad(lambda x: (np.sin(x) * 0.8642).sum())
    g(x)                                       # interpreted, compile held at the gate
    threading.Timer(0.2, gated.set).start()
    g.compile_for(x)                           # waits for the background compile

    @numba.njit
    def use(x):
        return g(x)
    np.testing.assert_allclose(use(x), np.cos(x) * 0.8642, rtol=1e-12)


def test_explain_shows_the_generated_source_even_while_compiling(gated, rng):
    x = rng.standard_normal(9)
    g = gj.grad(lambda x: (np.exp(x) * 0.1111).sum())
    g(x)
    text = gj.explain(g, x)
    assert "def entry(" in text
    assert "tier: NumPy interpreter, while Numba compiles in the background" in text
    gated.set()
    gj.wait_compiled(60)
    g(x)
    text = gj.explain(g, x)
    assert "tier: compiled code (Numba)" in text
    assert "cached entry: gj_" in text and "loaded in this process" in text


def test_modes_are_checked(monkeypatch):
    with pytest.raises(ValueError, match="set_tiering"):
        gj.set_tiering("sometimes")
    monkeypatch.setenv("GRADJIT_TIERING", "later")
    with pytest.raises(ValueError, match="GRADJIT_TIERING"):
        tiers.mode()


def test_explain_says_what_runs_for_a_tensor_and_before_the_first_call(rng):
    x = rng.standard_normal(7)
    g = gj.grad(lambda x: (np.cos(x) * 0.2222).sum())
    assert "tier: not called with these arguments yet" in gj.explain(g, x, file=_Null())
    t = gj.from_numpy(x).requires_grad_()
    text = gj.explain((t * t * 0.3333).sum(), file=_Null())
    assert "== what runs ==" in text and "tier: compiled code (Numba)" in text
    assert "cached entry: gj_" in text


class _Null:
    def write(self, s):
        return len(s)


def _child_state(seed):
    import numpy as np
    import gradjit as gj
    from gradjit.runtime import tiers as t
    pending = len(t._PENDING)          # as the parent's were at the fork
    x = np.random.default_rng(seed).standard_normal(5)
    return pending, gj.grad(lambda x: (np.tanh(x) * 0.4444).sum())(x), x   # a new structure


def test_fork_waits_for_background_compiles_so_children_can_compile(gated, rng):
    """A fork while a compile runs would leave the child the compiler's locks held by a
    thread it does not have: the fork waits for the compile (held at the gate here,
    opened 0.3 s later), so the child starts with none pending and compiles its own."""
    import multiprocessing as mp
    x = rng.standard_normal(10)
    gj.grad(lambda x: (np.sin(x) * np.cos(x) * 0.5555).sum())(x)
    assert len(tiers._PENDING) == 1
    threading.Timer(0.3, gated.set).start()
    with mp.get_context("fork").Pool(1) as pool:
        pending, g, x1 = pool.apply_async(_child_state, (3,)).get(timeout=120)
    assert pending == 0
    np.testing.assert_allclose(g, (1 - np.tanh(x1) ** 2) * 0.4444, rtol=1e-12)


def test_many_new_structures_share_one_compile_thread(monkeypatch, rng):
    """A loop over new input shapes queues its compiles for one thread (not a thread per
    structure, each waiting on Numba's lock with its own malloc arena and its own
    'taking long' warning); every gradient is right on both tiers."""
    gj.set_tiering("background")
    seen = []
    real = compiler._compile_in_background

    def counted(graph):
        seen.append(sum(t.name.startswith("gradjit-compile") for t in threading.enumerate()))
        return real(graph)
    monkeypatch.setattr(compiler, "_compile_in_background", counted)
    try:
        g = gj.grad(lambda x: (np.sin(x) * 0.7071).sum())
        for n in range(3, 9):
            x = rng.standard_normal(n)
            np.testing.assert_allclose(g(x), np.cos(x) * 0.7071, rtol=1e-12)
        assert gj.wait_compiled(120)
        assert len(seen) == 6 and max(seen) == 1
        for n in range(3, 9):   # (now compiled)
            x = rng.standard_normal(n)
            np.testing.assert_allclose(g(x), np.cos(x) * 0.7071, rtol=1e-12)
    finally:
        gj.set_tiering(None)


def test_compile_for_compiles_a_queued_structure_itself(monkeypatch, rng, tmp_path):
    """``compile_for`` of a structure still queued behind another's compile builds it in the
    calling thread instead of waiting for the queue."""
    # (an empty cache dir: a structure found on disk is loaded, never queued)
    monkeypatch.setenv("GRADJIT_CACHE_DIR", str(tmp_path))
    gate, first = threading.Event(), []
    real = compiler._compile_in_background

    def held(graph):   # the first compile waits for the gate; later ones run at once
        if not first:
            first.append(graph)
            assert gate.wait(60)
        return real(graph)
    monkeypatch.setattr(compiler, "_compile_in_background", held)
    gj.set_tiering("background")
    try:
        g1 = gj.grad(lambda x: (np.exp(x) * 0.3141).sum())
        g2 = gj.grad(lambda x: (np.cos(x) * 0.2718).sum())
        x = rng.standard_normal(7)
        g1(x)                          # its compile holds the compile thread at the gate
        end = time.monotonic() + 60
        while not first:
            assert time.monotonic() < end, "the first compile never started"
            time.sleep(0.001)
        g2(x)                          # queued behind it
        g2.compile_for(x)              # built here, the gate still shut
        assert not gate.is_set() and len(tiers._PENDING) == 1
        np.testing.assert_allclose(g2(x), -np.sin(x) * 0.2718, rtol=1e-12)
    finally:
        gate.set()
        gj.wait_compiled(60)
        gj.set_tiering(None)
    np.testing.assert_allclose(g1(x), np.exp(x) * 0.3141, rtol=1e-12)


def test_never_keeps_jacobian_transforms_on_the_interpreter():
    # the batched (Jacobian) entry ignored the switch and compiled
    gj.set_tiering("never")
    try:
        gj.reset_stats()
        h = gj.hessian(lambda x: (np.sin(x) * x).sum())(np.array([0.5, 1.0]))
        j = gj.jacrev(np.sin)(np.array([0.5, 1.0]))
    finally:
        gj.set_tiering(None)
    x = np.array([0.5, 1.0])
    np.testing.assert_allclose(np.diag(h), 2 * np.cos(x) - x * np.sin(x), rtol=1e-12)
    np.testing.assert_allclose(np.diag(j), np.cos(x), rtol=1e-12)
    assert gj.stats()["compiles"] == 0
