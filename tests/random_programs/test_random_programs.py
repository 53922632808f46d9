"""Random NumPy programs (tests/random_programs/generator.py) through gj.jit and gj.grad:
the value equals NumPy's and the gradient w.r.t. every input equals central finite
differences. A ``gj.GradjitError`` is an accepted refusal (reported as a hypothesis
event: ``pytest --hypothesis-show-statistics``); any other exception or a wrong number
fails.

A small, derandomized budget runs with the slow suite (interpreter executor, plus a few
compiled programs); ``python bench/random_programs.py --long`` runs 10,000. Features listed in
``generator.KNOWN_BUGS`` are left out here (the CLI keeps them with ``--all``).
"""
import numpy as np
import pytest
from hypothesis import HealthCheck, assume, event, given, settings

import gradjit as gj

from .generator import (KNOWN_BUGS, check_program, executor, normalize_message, programs,
                        random_program)

CI_EXCLUDE = tuple(KNOWN_BUGS)
_SETTINGS = dict(derandomize=True, database=None, deadline=None, print_blob=False,
                 suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much,
                                        HealthCheck.data_too_large])


def _verdict(out):
    if out.kind == "refused":
        event(f"refused: {type(out.error).__name__}: {normalize_message(str(out.error))}")
    assume(out.kind != "discard")     # finite differences unstable: a kink nearby
    if out.kind in ("wrong", "crash"):
        pytest.fail(f"{out.kind.upper()} in gj.{out.stage}: {out.detail}\n\n"
                    f"{out.prog.repro(f'features: {sorted(out.prog.features)}')}", pytrace=False)


@pytest.mark.slow
@settings(max_examples=700, **_SETTINGS)
@given(programs(exclude=CI_EXCLUDE))
def test_random_programs_interpreted(prog):
    with executor("numpy"):
        _verdict(check_program(prog))


@pytest.mark.slow   # (about 45 s of Numba compiles: the default run's largest single test)
@settings(max_examples=4, **_SETTINGS)
@given(programs(exclude=CI_EXCLUDE, max_steps=6))
def test_random_programs_compiled(prog):
    with executor(None):
        _verdict(check_program(prog))


def test_the_oracle_catches_a_wrong_gradient_and_a_wrong_value(monkeypatch):
    """The check itself: a gradient off by 1e-4 (relative) in one element, or a value
    off by 1e-8, is reported wrong; a non-gradjit exception is a crash."""
    import gradjit as gj
    prog = next(p for p in (random_program(s) for s in range(100))
                if p.steps and "assign" not in " ".join(p.features)
                and "sort.inplace" not in p.features)
    with executor("numpy"):
        assert check_program(prog).kind == "pass"
        grad, jit = gj.grad, gj.jit

        def off_grad(f, argnums=0):
            g = grad(f, argnums=argnums)

            def h(*a):
                r = [np.array(x, dtype=float, copy=True) for x in g(*a)]
                k = max(range(len(r)), key=lambda i: np.max(np.abs(r[i]), initial=0))
                r[k].flat[np.argmax(np.abs(r[k]))] *= 1 + 1e-4
                return tuple(r)
            return h

        monkeypatch.setattr(gj, "grad", off_grad)
        assert check_program(prog).kind == "wrong"
        monkeypatch.setattr(gj, "grad", grad)
        monkeypatch.setattr(gj, "jit", lambda f: (lambda *a: jit(f)(*a) * (1 + 1e-8) + 1e-8))
        assert check_program(prog).kind == "wrong"

        def boom(f):
            def h(*a):
                raise TypeError("internal")
            return h
        monkeypatch.setattr(gj, "jit", boom)
        assert check_program(prog).kind == "crash"


def test_programs_render_to_source_that_numpy_runs_step_by_step():
    for seed in range(20):
        prog = random_program(seed)
        f = prog.function()
        value = f(*prog.inputs)
        ns = {"np": np, "gj": gj, **dict(zip(prog.input_names, prog.inputs))}
        for s in prog.steps:
            exec(s.src, ns)
        again = sum(float((np.asarray(ns[n]) * eval(w, {"np": np})).sum()) for n, w in prog.loss_terms)
        assert np.isclose(value, again, rtol=1e-12, atol=1e-12)
        assert "def f(" in prog.repro() and "gj.grad(f" in prog.repro()


def test_the_outside_stage_catches_a_stale_capture(monkeypatch):
    """The outside-state stage (outside.py) for every kind of holder: it passes, and it
    reports a wrong number when gradjit would keep the value captured at the first call
    (guards switched off)."""
    from gradjit.runtime import transforms
    from .generator import oracle
    from .outside import KINDS, check_outside
    prog = next(p for p in (random_program(s) for s in range(200))
                if len(p.inputs) >= 2 and p.steps and "assign" not in " ".join(p.features)
                and oracle(p).stable)
    orc = oracle(prog)
    with executor("numpy"):
        for kind in KINDS:
            assert check_outside(prog, orc, kind) is None, kind
        monkeypatch.setattr(transforms, "guards_for", lambda fn, statics, consts: None)
        for kind in KINDS:
            out = check_outside(prog, orc, kind)
            assert out is not None and out.kind == "wrong", (kind, out)
