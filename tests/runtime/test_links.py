"""Helpers a generated entry calls are bound to their loaded code, not copied into it
(runtime/links.py); a cached entry whose helpers cannot be loaded is compiled again.

Read from counters, the compiled libraries' symbols and results, never from clocks.
"""
import pickle

import numba
import numpy as np
import pytest

import gradjit as gj
from gradjit.runtime import compiler, links
from gradjit.tracer import cache_store
from tests.runtime.rnn_child import rnn_child


def _rnn(Wx, Wh, b, h, *xs):
    for x in xs:
        h = np.tanh(x @ Wx + h @ Wh + b)
    return (h * h).sum()


def _rnn_args(rng, T=30):
    return ([rng.normal(size=(3, 4)) / 2, rng.normal(size=(4, 4)) / 3, rng.normal(size=4),
             rng.normal(size=(1, 4))] + [rng.normal(size=(1, 3)) for _ in range(T)])


def _helper_symbols():
    from gradjit.lowering import blas_cpu
    return {c.fndesc.mangled_name for d in (blas_cpu.smm, blas_cpu.ger, blas_cpu.outer)
            for c in d.overloads.values()}


def _defined(module):
    return {f.name for f in module.functions if not f.is_declaration}


def test_called_helpers_stay_out_of_the_entry_and_in_what_callers_link(rng, monkeypatch):
    args = _rnn_args(rng, T=31)   # (a length no other test compiles: a fresh compile)
    before = links.STATS["shared"]
    opt = gj.grad(_rnn, argnums=(0, 1, 2)).graphs(*args)[1]   # (compiles it)
    exe = compiler.compile_graph(opt)
    assert links.STATS["shared"] - before >= 2   # smm and ger at least
    lib = exe.fn.overloads[next(iter(exe.fn.overloads))].library
    helpers = _helper_symbols()
    assert not helpers & _defined(lib._final_module)          # called, not carried
    assert helpers & {f.name for f in lib._final_module.functions}
    assert helpers & _defined(lib._get_module_for_linking())  # a caller gets them back
    got = exe(list(args))
    monkeypatch.setenv("GRADJIT_EXECUTOR", "numpy")
    want = compiler.compile_graph(opt)(list(args))
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)


def test_blas_products_are_called_not_carried(rng, monkeypatch):
    from gradjit.lowering import blas_cpu

    def mlp(X, W, V):
        return (np.tanh(X @ W) @ V).sum()

    args = [rng.normal(size=(37, 29)), rng.normal(size=(29, 23)), rng.normal(size=(23, 5))]
    opt = gj.grad(mlp, argnums=(1, 2)).graphs(*args)[1]
    exe = compiler.compile_graph(opt)
    assert "bl.mm(" in exe.source
    lib = exe.fn.overloads[next(iter(exe.fn.overloads))].library
    mm = {c.fndesc.mangled_name for c in blas_cpu.mm.overloads.values()}
    assert not mm & _defined(lib._final_module)                 # called, not carried
    assert mm & {f.name for f in lib._final_module.functions}
    assert mm & _defined(lib._get_module_for_linking())
    got = exe(list(args))
    monkeypatch.setenv("GRADJIT_EXECUTOR", "numpy")
    want = compiler.compile_graph(opt)(list(args))
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-13)


def test_a_users_njit_caller_carries_the_helpers_it_needs(rng):
    args = _rnn_args(rng, T=3)
    opt = gj.grad(_rnn, argnums=(0, 1, 2)).graphs(*args)[1]
    exe = compiler.compile_graph(opt)
    entry = exe.fn
    assert entry.py_func.__code__.co_argcount == len(args) + 1   # (the arrays, consts)

    @numba.njit
    def twice(a0, a1, a2, a3, a4, a5, a6, consts):
        return entry(a0, a1, a2, a3, a4, a5, a6, consts)[0] * 2.0

    got = twice(*args, exe.consts)
    np.testing.assert_allclose(got, 2.0 * exe(list(args))[0], rtol=1e-13)
    user = twice.overloads[next(iter(twice.overloads))].library._final_module
    declared_only = {f.name for f in user.functions if f.is_declaration}
    assert _helper_symbols() and not _helper_symbols() & declared_only


def _store(monkeypatch, tmp_path):
    """The verified store of ``tmp_path`` (records are read and written through it)."""
    monkeypatch.setenv("GRADJIT_CACHE_DIR", str(tmp_path))
    return cache_store.current()


@pytest.mark.slow   # (fresh processes: CI's slow suite runs it)
def test_a_fresh_process_loads_the_helpers_first_or_compiles_again(tmp_path, monkeypatch):
    first = rnn_child(tmp_path)
    assert first["stats"]["compiles"] == 1 and first["links"]["shared"] >= 2
    (record,) = (tmp_path / "numba").glob("gj_*.links")
    store = _store(monkeypatch, tmp_path)
    recorded = pickle.loads(store.read(str(record)))
    needed = [r for r in recorded if r[3] is not None]
    assert {("gradjit.lowering.blas_cpu", "ger"), ("gradjit.lowering.blas_cpu", "smm")} <= \
        {(m, f) for m, f, _, _ in needed}
    # a fresh process: the helpers load first, then the entry's cached code
    second = rnn_child(tmp_path)
    assert second["stats"]["compiles"] == 0 and second["stats"]["disk_hits"] == 1
    assert second["links"]["linked"] >= len(needed) and second["g"] == first["g"]
    # without the record nothing says which helpers the cached code calls: compiled again
    # (had its cached code been loaded, its calls would not resolve and the process end)
    record.unlink()
    third = rnn_child(tmp_path)
    assert third["stats"]["compiles"] == 1 and third["g"] == first["g"]
    # a helper whose code here is not what the entry calls (another symbol): compiled again
    m, f, a, _ = needed[0]
    stale = [r for r in pickle.loads(store.read(str(record))) if r[:2] != (m, f)]
    store.write(str(record), pickle.dumps(stale + [(m, f, a, "no_such_symbol")]))
    fourth = rnn_child(tmp_path)
    assert fourth["stats"]["compiles"] == 1 and fourth["g"] == first["g"]
    fifth = rnn_child(tmp_path)   # (the fourth wrote a good record again)
    assert fifth["stats"]["compiles"] == 0 and fifth["g"] == first["g"]


def test_a_missing_unreadable_unverified_or_foreign_record_is_not_ready(tmp_path, monkeypatch):
    store = _store(monkeypatch, tmp_path)
    calls = []
    load = lambda d, a: calls.append(d)   # noqa: E731
    assert links.load_links(str(tmp_path / "none.links"), load) is False
    bad = str(tmp_path / "bad.links")
    store.write(bad, b"not a pickle")
    assert links.load_links(bad, load) is False
    gone = str(tmp_path / "gone.links")
    store.write(gone, pickle.dumps([("gradjit.lowering.no_such_module", "f", (), "sym")]))
    assert links.load_links(gone, load) is False
    old = str(tmp_path / "old.links")   # (a record of another layout)
    store.write(old, pickle.dumps([("gradjit.lowering.blas_cpu", "ger", ())]))
    assert links.load_links(old, load) is False
    foreign = tmp_path / "foreign.links"
    store.write(str(foreign), pickle.dumps([("os", "path", (), None)]))
    assert links.load_links(str(foreign), load) is True   # nothing needed, nothing loaded
    # written by anything but the store (no digest): never unpickled, not ready
    marker = tmp_path / "ran"
    planted = tmp_path / "planted.links"
    planted.write_bytes(pickle.dumps(_Payload(str(marker))))
    assert links.load_links(str(planted), load) is False and not marker.exists()
    assert not planted.exists()   # (discarded)
    assert calls == []


class _Payload:
    """A pickle that, when unpickled, creates a file."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


_BATCHED_CHILD = """
import json, numpy as np, gradjit as gj
r = np.random.default_rng(1)
w = gj.tensor(r.normal(size=(3, 4)), requires_grad=True)
x = gj.tensor(r.normal(size=(5, 3)))
out = (x @ w).tanh() * 1.5
(g,) = gj.autograd.grad(out, w, grad_outputs=gj.tensor(r.normal(size=(7, 5, 4))),
                        is_grads_batched=True)
print(json.dumps({"stats": gj.stats(), "g": np.asarray(g).tolist()}))
"""


@pytest.mark.slow   # (fresh processes: CI's slow suite runs it)
def test_a_fresh_compile_reads_no_cached_code_of_its_modules_other_functions(tmp_path):
    # entry_batched calls entry, a function of the same generated module. Compiling
    # entry_batched afresh (its record of the helpers it calls gone) once loaded entry's
    # cached code, which called a product helper this process had not loaded: LLVM
    # aborted the process ("Symbol not found: ...blas_cpu2mm...")
    import json
    import os
    import subprocess
    import sys

    def child():
        env = dict(os.environ, GRADJIT_CACHE_DIR=str(tmp_path))
        env.pop("GRADJIT_EXECUTOR", None)
        out = subprocess.run([sys.executable, "-c", _BATCHED_CHILD], env=env,
                             capture_output=True, text=True)
        assert out.returncode == 0, out.stderr[-2000:]
        return json.loads(out.stdout.strip().splitlines()[-1])
    first = child()
    for record in (tmp_path / "numba").glob("gj_*.links"):
        record.unlink()
    second = child()
    assert second["stats"]["compiles"] >= 1 and second["g"] == first["g"]
