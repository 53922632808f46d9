"""Compile-once behaviour, read from counters (never from clocks)."""
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import gradjit as gj
from gradjit.runtime import compiler


def _delta(before):
    after = gj.stats()
    return {k: after[k] - before[k] for k in ("compiles", "disk_hits", "memory_hits")}


def _step(w, x):
    loss = (np.tanh(gj.tensor(x) * w + 0.5) ** 2).sum()
    loss.backward()
    return loss


def test_same_structure_backward_compiles_once(rng):
    w = gj.tensor(rng.normal(size=(7, 3)), requires_grad=True)
    x = rng.normal(size=(7, 3))
    before = gj.stats()
    _step(w, x)
    first = _delta(before)
    assert first["compiles"] + first["disk_hits"] + first["memory_hits"] == 1
    before = gj.stats()
    for _ in range(3):
        _step(w, rng.normal(size=(7, 3)))   # new values, same structure
    assert _delta(before) == {"compiles": 0, "disk_hits": 0, "memory_hits": 3}
    # Gradients accumulated over the four steps, as in torch.
    assert w.grad.shape == (7, 3)


def test_scalar_values_are_arguments_not_source(rng):
    x = rng.normal(size=(5,))
    grads = []
    before = gj.stats()
    for c in (2.0, 3.0, 4.5):
        t = gj.tensor(x, requires_grad=True)
        (t * c).sum().backward()
        grads.append(t.grad.data)
    d = _delta(before)
    assert d["compiles"] + d["disk_hits"] <= 1          # one source, one compilation
    for c, g in zip((2.0, 3.0, 4.5), grads):
        np.testing.assert_allclose(g, np.full(5, c))


def test_jit_grad_traces_once_per_signature(rng):
    calls = []

    def f(w, b):
        calls.append(1)
        return (np.tanh(w * 3.0 + b) ** 2).sum()

    df = gj.grad(f, argnums=(0, 1))
    w, b = rng.normal(size=10), rng.normal(size=10)
    df(w, b)
    df(w + 1, b)
    df(w, b - 1)
    assert len(calls) == 1
    df(rng.normal(size=11), rng.normal(size=11))      # new shape: a new trace
    assert len(calls) == 2
    df(w.astype(np.float32), b.astype(np.float32))    # new dtype: a new trace
    assert len(calls) == 3


def test_generated_module_written_once_and_importable(rng):
    x = rng.normal(size=(4,))
    t = gj.tensor(x, requires_grad=True)
    (t.sin() * t).sum().backward()
    files = [f for f in os.listdir(compiler.cache_dir()) if f.startswith("gj_") and f.endswith(".py")]
    assert files
    mtimes = {f: os.stat(os.path.join(compiler.cache_dir(), f)).st_mtime_ns for f in files}
    t2 = gj.tensor(x, requires_grad=True)
    (t2.sin() * t2).sum().backward()
    for f in files:
        assert os.stat(os.path.join(compiler.cache_dir(), f)).st_mtime_ns == mtimes[f]
    names = [m for m in sys.modules if m.startswith("gradjit_gen_")]
    assert names and all(sys.modules[m].__file__.startswith(compiler.cache_dir()) for m in names)


_CHILD = textwrap.dedent("""
    import json, numpy as np, gradjit as gj
    w = np.linspace(-1, 1, 12); x = np.linspace(0, 2, 12)
    g = gj.grad(lambda w, x: (np.tanh(x * w + 0.1) ** 2).sum())(w, x)
    t = gj.tensor(w, requires_grad=True)
    (np.exp(t) * x).sum().backward()
    out = {"stats": gj.stats(), "g": g.tolist(), "t": t.grad.data.tolist()}
    if NEW:     # a compile after disk hits: Numba must still set up its registries then
        out["new"] = gj.grad(lambda w: (np.sin(w) * np.cos(w).sum()).sum())(w).tolist()
        out["new_stats"] = gj.stats()
    print(json.dumps(out))
""")


def _run_child(cache, new=False):
    env = dict(os.environ, GRADJIT_CACHE_DIR=str(cache))
    env.pop("GRADJIT_EXECUTOR", None)
    out = subprocess.run([sys.executable, "-c", f"NEW = {new}\n" + _CHILD], env=env,
                         capture_output=True, text=True, check=True)
    import json
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.slow   # (fresh processes: CI's slow suite runs it)
def test_fresh_process_with_warm_disk_cache_compiles_nothing(tmp_path):
    first = _run_child(tmp_path)
    assert first["stats"]["compiles"] == 2 and first["stats"]["disk_hits"] == 0
    assert first["stats"]["plan_misses"] == 2 and first["stats"]["plan_hits"] == 0
    second = _run_child(tmp_path)
    assert second["stats"]["compiles"] == 0
    assert second["stats"]["disk_hits"] == 2
    # ... and generates no source: both plans come from the disk
    assert second["stats"]["plan_hits"] == 2 and second["stats"]["plan_misses"] == 0
    assert second["g"] == first["g"] and second["t"] == first["t"]
    # disk hits skip Numba's registry refresh (compiler._load_cached); a compile later in
    # the same process must still work
    third = _run_child(tmp_path, new=True)
    assert third["stats"]["compiles"] == 0 and third["stats"]["disk_hits"] == 2
    assert third["g"] == first["g"] and third["t"] == first["t"]
    assert third["new_stats"]["compiles"] == 1
    w = np.linspace(-1, 1, 12)
    np.testing.assert_allclose(third["new"], np.cos(w) * np.cos(w).sum()
                               - np.sin(w) * np.sin(w).sum(), rtol=1e-12)


def test_interpreter_and_compiled_agree(rng, monkeypatch):
    w, x = rng.normal(size=(3, 4)), rng.normal(size=(5, 3))

    def f(w, x):
        return (np.tanh(x @ w).softmax(1) * np.arange(4.0)).sum()

    compiled = gj.grad(f)(w, x)
    monkeypatch.setenv("GRADJIT_EXECUTOR", "numpy")
    interpreted = gj.grad(f)(w, x)
    np.testing.assert_allclose(compiled, interpreted, rtol=1e-12, atol=1e-14)


def test_results_never_alias_the_callers_arrays():
    x = np.arange(6.0)
    for f in (lambda a: a[::2], lambda a: a.reshape(2, 3).T, lambda a: a.reshape(3, 2)):
        out = gj.jit(f)(x)
        out[...] = -1.0
        np.testing.assert_array_equal(x, np.arange(6.0))


def test_compiles_pause_the_collector_and_restore_the_callers_setting(rng):
    # The collector is off while a graph is traced and compiled (compiler.gc_paused), and
    # afterwards as the caller had it: on, off, or after an error in the traced function.
    import gc
    seen = []

    def f(x):
        seen.append(gc.isenabled())
        return (np.sin(x) * x).sum()

    def bad(x):
        seen.append(gc.isenabled())
        raise ValueError("in the user's function")

    x = rng.normal(size=(3,))
    was = gc.isenabled()
    try:
        gc.enable()
        np.testing.assert_allclose(gj.grad(f)(x), np.sin(x) + x * np.cos(x))
        assert seen == [False] and gc.isenabled()
        try:
            gj.grad(bad)(x)
        except ValueError:
            pass
        assert seen == [False, False] and gc.isenabled()
        gc.disable()
        gj.grad(f)(x + 1.0)           # same signature: no trace
        gj.grad(f)(x[:2])             # a new signature: traced and compiled
        assert seen[-1] is False and not gc.isenabled()
        with compiler.gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable() if was else gc.disable()


def test_a_compiles_survivors_leave_the_young_generation(rng):
    # What a compile leaves is moved to the oldest generation (gc.freeze + gc.unfreeze),
    # not scanned by young collections; a caller's own frozen objects stay frozen.
    import gc

    def oldest(obj):
        return any(o is obj for o in gc.get_objects(generation=2))
    x = rng.normal(size=(4,))
    was = gc.isenabled()
    gc.enable()
    try:
        gj.grad(lambda a: (np.cos(a) * a).sum())(x)
        with compiler.gc_paused():
            junk = [[k] for k in range(5000)]   # young objects made inside the block
        assert oldest(junk[0]) and gc.get_freeze_count() == 0
        outside = [[k] for k in range(5000)]
        assert not oldest(outside[0])
        gc.freeze()   # `outside` is frozen now: not in any generation
        try:
            with compiler.gc_paused():
                junk = [[k] for k in range(5000)]
            assert not oldest(junk[0]) and not oldest(outside[0]) and gc.get_freeze_count()
        finally:
            gc.unfreeze()
    finally:
        gc.enable() if was else gc.disable()
