"""The code-generation level a generated module names (``CODEGEN_OPT``, runtime/levels.py).

Read from counters (objects emitted at the module's level) and results, never from clocks.
"""
import uuid

import numpy as np
import pytest

import gradjit as gj
from gradjit.lowering import codegen_cpu
from gradjit.runtime import compiler, levels, plans
from tests.runtime.rnn_child import rnn_child


def _source(level, extra_import=""):
    # A fresh module each time (the uuid): Numba must compile it, not read its cache.
    return (f"# {uuid.uuid4().hex}\nimport numba\nimport numpy as np\n{extra_import}\n"
            f"LLVM_OPT = 1\nCODEGEN_OPT = {level}\n\n\n"
            "@numba.njit(cache=True)\ndef entry(x):\n"
            "    s = 0.0\n    for i in range(x.shape[0]):\n        s += x[i] * x[i]\n"
            "    return s\n")


def _emitted(src):
    before = levels.STATS["emitted"]
    fn = compiler.load(src, (compiler._numba_type(np.zeros(3)),))
    assert fn(np.arange(3.0)) == 5.0
    return levels.STATS["emitted"] - before


def test_level_zero_module_gets_its_machine_code_from_us(monkeypatch):
    monkeypatch.delenv("NUMBA_OPT", raising=False)
    assert _emitted(_source(0)) == 1


def test_without_a_level_numba_emits_it(monkeypatch):
    monkeypatch.delenv("NUMBA_OPT", raising=False)
    assert _emitted(_source(None)) == 0
    assert _emitted(_source(None).replace("CODEGEN_OPT = None\n", "")) == 0


def test_a_users_numba_opt_wins(monkeypatch):
    monkeypatch.setenv("NUMBA_OPT", "3")
    assert _emitted(_source(0)) == 0


def test_helpers_first_compiled_inside_keep_numbas_level(tmp_path, monkeypatch):
    """A helper from another module, compiled for the first time while a level-0 module
    compiles, is not emitted at level 0 (it is cached for every later caller)."""
    monkeypatch.delenv("NUMBA_OPT", raising=False)
    name = f"gj_level_helper_{uuid.uuid4().hex[:12]}"
    (tmp_path / f"{name}.py").write_text(
        "import numba\n\n@numba.njit(cache=False)\ndef sq(v):\n    return v * v\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    src = _source(0, f"import {name} as hp\n").replace("x[i] * x[i]", "hp.sq(x[i])")
    assert _emitted(src) == 1   # the entry's library only


@pytest.mark.slow   # (fresh processes: CI's slow suite runs it)
def test_level_zero_code_is_cached_for_a_fresh_process(tmp_path):
    first = rnn_child(tmp_path)
    assert first["stats"]["compiles"] == 1 and first["emitted"] >= 1
    second = rnn_child(tmp_path)
    assert second["stats"]["compiles"] == 0 and second["stats"]["disk_hits"] == 1
    assert second["emitted"] == 0 and second["g"] == first["g"]


# -- which modules name level 0 ---------------------------------------------------------
def _rnn(Wx, Wh, b, h, *xs):
    for x in xs:
        h = np.tanh(x @ Wx + h @ Wh + b)
    return (h * h).sum()


def _rnn_args(rng, T, hidden=5, inp=3):
    return ([rng.normal(size=(inp, hidden)) / 2, rng.normal(size=(hidden, hidden)) / 3,
             0.1 * rng.normal(size=hidden), 0.1 * rng.normal(size=(1, hidden))]
            + [rng.normal(size=(1, inp)) for _ in range(T)])


def _compiled(f, args, argnums, monkeypatch, tag):
    """(source, results) of f's joint graph compiled under the current settings."""
    opt = gj.grad(f, argnums=argnums).graphs(*args)[1]
    monkeypatch.setattr(plans, "_CODE", [tag])   # no plan made under other settings
    exe = compiler.compile_graph(opt)
    return exe.source, exe(list(args))


def test_rolled_rnn_is_level_zero_and_agrees_bitwise_with_numbas_level(rng, monkeypatch):
    monkeypatch.delenv("NUMBA_OPT", raising=False)
    args = _rnn_args(rng, 40)
    src, got = _compiled(_rnn, args, (0, 1, 2), monkeypatch, "level zero")
    assert "\nCODEGEN_OPT = 0\n" in src
    monkeypatch.setattr(codegen_cpu, "FAST_CODEGEN_WORK", -1)
    src_off, want = _compiled(_rnn, args, (0, 1, 2), monkeypatch, "numba's level")
    assert "CODEGEN_OPT" not in src_off
    for a, b in zip(got, want):   # the same IR: machine code at any level computes the same
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("batch, fast", [(1, True), (64, False)], ids=["batch 1", "batch 64"])
def test_loops_that_sum_many_elements_keep_numbas_level(batch, fast, rng, monkeypatch):
    """Batch 64: the bias gradient sums 64 x 8 elements per step, 20,480 in all (more than
    FAST_CODEGEN_SUMS); batch 1 sums nothing."""
    args = _rnn_args(rng, 40, hidden=8)
    args[3:] = [np.repeat(a, batch, axis=0) for a in args[3:]]
    src, _ = _compiled(_rnn, args, (0, 1, 2), monkeypatch, f"batch {batch}")
    assert ("\nCODEGEN_OPT = 0\n" in src) == fast


def test_short_graphs_keep_numbas_level(rng, monkeypatch):
    args = _rnn_args(rng, 3)
    src, _ = _compiled(_rnn, args, (0, 1, 2), monkeypatch, "short")
    assert "CODEGEN_OPT" not in src
