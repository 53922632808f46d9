"""The LLVM level a generated module names (``LLVM_OPT``) is the one Numba compiles it at.

Read from the pass builders Numba makes (counts), never from clocks.
"""
import uuid

import numpy as np
import pytest
from numba.core import codegen as numba_codegen, config as numba_config

from gradjit.lowering.codegen_cpu import LLVM_OPT_PARALLEL, LLVM_OPT_SERIAL, PARALLEL_MIN, generate
from gradjit.lowering.passes import optimize
from gradjit.runtime import compiler
from gradjit.tracer.trace import trace


def _source(level):
    # A fresh module each time (the uuid): Numba must compile it, not read its cache.
    return (f"# {uuid.uuid4().hex}\nimport numba\nimport numpy as np\n\n"
            + ("" if level is None else f"LLVM_OPT = {level}\n")
            + "\n\n@numba.njit(cache=True)\ndef entry(x):\n"
            "    s = 0.0\n    for i in range(x.shape[0]):\n        s += x[i] * x[i]\n"
            "    return s\n")


@pytest.fixture
def levels(monkeypatch):
    """The ``opt`` of every pass builder Numba makes while the test runs. (Numba's own
    first, "cheap" module pass runs at 0 whatever the level: the tests read the highest.)"""
    seen = []
    real = numba_codegen.create_pass_builder

    def spy(tm, opt=2, **kw):
        seen.append(int(opt))
        return real(tm, opt=opt, **kw)
    _compile(None)   # Numba's one-time set-up (its runtime module, at its own level)
    monkeypatch.setattr(numba_codegen, "create_pass_builder", spy)
    return seen


def _compile(level):
    sig = (compiler._numba_type(np.zeros(3)),)
    fn = compiler.load(_source(level), sig)
    assert fn(np.arange(3.0)) == 5.0
    return fn


def test_module_level_is_the_compile_level(levels, monkeypatch):
    monkeypatch.delenv("NUMBA_OPT", raising=False)
    before = numba_config.OPT
    _compile(1)
    assert max(levels) == 1
    assert numba_config.OPT == before and type(numba_config.OPT) is type(before)


def test_without_a_level_numba_keeps_its_own(levels):
    _compile(None)
    assert max(levels) == int(numba_config.OPT)


def test_a_users_numba_opt_wins(levels, monkeypatch):
    monkeypatch.setenv("NUMBA_OPT", str(int(numba_config.OPT)))
    _compile(1)
    assert max(levels) == int(numba_config.OPT)


@pytest.fixture
def function_passes(monkeypatch):
    """Per module Numba runs its function passes on: whether it defines generated code."""
    from gradjit.runtime import levels as lv
    seen, real = [], lv._ORIGINAL_FUNCTION_PASSES
    if real is None:
        pytest.skip("this Numba has no per-module function passes to skip")

    def spy(lib, module):
        seen.append(any(lv.GENERATED in f.name for f in module.functions if not f.is_declaration))
        return real(lib, module)
    monkeypatch.setattr(lv, "_ORIGINAL_FUNCTION_PASSES", spy)
    return seen


def test_level_one_modules_skip_the_function_passes(function_passes, monkeypatch):
    monkeypatch.delenv("NUMBA_OPT", raising=False)
    _compile(1)
    assert True not in function_passes
    _compile(3)
    assert True in function_passes   # (the module passes after linking are level 3's)
    function_passes.clear()
    _compile(None)
    assert True in function_passes


def test_level_restored_when_the_compile_fails(monkeypatch):
    monkeypatch.delenv("NUMBA_OPT", raising=False)
    before = numba_config.OPT
    src = _source(1).replace("s += x[i] * x[i]", "s += x[i] * undefined_name")
    with pytest.raises(Exception):
        compiler.load(src, (compiler._numba_type(np.zeros(3)),))
    assert numba_config.OPT == before


def _generated(n):
    g, (x,), _ = trace([np.ones(n)], name="level")
    g.outputs = [(x.tanh() * 2.0).value]
    return generate(optimize(g)).source


def test_generated_modules_name_their_level():
    assert f"\nLLVM_OPT = {LLVM_OPT_SERIAL}\n" in _generated(100)
    big = _generated(PARALLEL_MIN)
    assert "prange(" in big and f"\nLLVM_OPT = {LLVM_OPT_PARALLEL}\n" in big
