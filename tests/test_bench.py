"""The benchmark harness (bench/run.py) works end to end: gradients checked before
timing, a wrong engine reported FAILED and not timed, batches sized from warm calls,
fresh-process rows, and the JSON it writes. No assertion reads a clock's value.
"""
import importlib.util
import itertools
import json
import os
import subprocess
import sys
import time

import numpy as np
import pytest

BENCH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench")


@pytest.fixture()
def run(monkeypatch):
    monkeypatch.syspath_prepend(BENCH)   # (run.py imports workloads.py beside it)
    spec = importlib.util.spec_from_file_location("gj_bench_run", os.path.join(BENCH, "run.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_batches_are_sized_from_warm_calls_not_from_the_slow_first_ones(run):
    order = []
    first = itertools.count()

    def slow_start():
        if next(first) < 2:
            time.sleep(0.05)   # (a first call that loads and compiles)
        order.append("a")

    got = run.timed({"a": slow_start, "b": lambda: order.append("b")}, budget=0.02,
                    min_reps=20, max_reps=3000)
    assert len(got["a"]) >= 20 and len(got["b"]) >= 20
    timed_order = order[3:]   # (a's warm-up and sizing calls come first)
    longest = max(len(list(g)) for k, g in itertools.groupby(timed_order) if k == "a")
    # A warm call of ~0.1 us gives batches of up to 1000 (3 tolerates a stall of ~3 ms in
    # the one sizing call); the old sizing, from the slow first calls, gave 1.
    assert longest >= 3


def test_an_engine_that_disagrees_with_numpy_is_failed_and_not_timed(run, monkeypatch):
    good = run.MAKERS["numpy"]

    def wrong(name):
        e = good(name)
        call = e.call
        e.call = lambda *a: tuple(g * 1.001 for g in call(*a))
        return e

    monkeypatch.setitem(run.MAKERS, "numpy", wrong)
    monkeypatch.setitem(run.BUDGET, "W1", ((0.01, 5, 50), (0.01, 5, 50)))
    rows = run.bench_workload("W1", ["numpy", "numba"], True, {}, lambda s: None)
    by = {r["engine"]: r for r in rows}
    assert by["numpy"]["status"].startswith("FAILED: gradient differs from numpy")
    assert "median_us" not in by["numpy"]
    assert by["numba"]["status"] == "ok" and by["numba"]["reps"] >= 5


@pytest.mark.slow   # (seconds of compiles: with the slow suites, which .ci/run runs)
def test_quick_run_end_to_end_writes_tables_and_json(tmp_path):
    out = tmp_path / "out.json"
    env = {k: v for k, v in os.environ.items() if k not in ("GRADJIT_CACHE_DIR", "GRADJIT_EXECUTOR")}
    r = subprocess.run([sys.executable, os.path.join(BENCH, "run.py"), "--quick", "--engines",
                        "numpy", "numba", "gradjit-jit", "--workloads", "W1", "--json",
                        str(out), "--png", ""], env=env, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "| workload | engine | median µs/call |" in r.stdout
    assert "| workload | engine | import s | cold: first gradient s |" in r.stdout
    assert "W1 gradjit-jit: median" in r.stderr   # (the progress line of a cell)
    res = json.loads(out.read_text())
    rows = {x["engine"]: x for x in res["rows"]}
    assert set(rows) == {"numpy", "numba", "gradjit-jit"}
    for x in rows.values():
        assert x["status"] == "ok" and x["reps"] >= 50 and x["max_rel_err"] <= 1e-8
        assert x["min_us"] <= x["median_us"] <= x["max_us"]
    assert rows["gradjit-jit"]["ratio_vs_gradjit_jit"] == 1.0
    fresh = {x["engine"]: x for x in res["fresh"]}
    cold, warm = fresh["gradjit-jit"]["cold"], fresh["gradjit-jit"]["warm"]
    assert cold["stats"]["compiles"] >= 1 and warm["stats"]["compiles"] == 0
    assert warm["stats"]["disk_hits"] >= 1 and fresh["gradjit-jit"]["warm_ok"] is True
    # a new program on a used machine: its own entry compiled, the helpers' code loaded
    new = fresh["gradjit-jit"]["new"]
    assert new["stats"]["compiles"] == 1 and np.isfinite(new["compiled_s"])
    assert "| new program: compiled s |" in r.stdout
    assert np.isfinite(cold["first_grad_s"]) and "warm" in fresh["numba"]


@pytest.mark.slow   # (fresh processes: CI's slow suite runs it)
def test_busy_mode_times_again_beside_another_process(run, monkeypatch):
    started = []

    def fake_spinner():       # (a process that sleeps: the plumbing, not the load)
        p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        started.append(p)
        return p
    monkeypatch.setattr(run, "spinner", fake_spinner)
    monkeypatch.setitem(run.BUDGET, "W1", ((0.01, 5, 50), (0.01, 5, 50)))
    rows = run.bench_workload("W1", ["numpy", "numba"], True, {}, lambda s: None, busy=True)
    assert len(started) == 1 and started[0].poll() is not None     # killed when done
    for r in rows:
        assert r["busy_reps"] >= 5 and r["busy_over_quiet"] == r["busy_median_us"] / r["median_us"]
    table = run.busy_table(rows, True)
    assert table.startswith("| workload | engine | quiet median µs |") and "| numba |" in table


def test_the_run_records_the_thread_environment_and_sets_none(run, monkeypatch):
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "3")
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    env = run._thread_env()
    assert env["OPENBLAS_NUM_THREADS"] == "3" and "OMP_WAIT_POLICY" not in env
    assert "GRADJIT_CACHE_DIR" not in env
    assert "OPENBLAS_NUM_THREADS=3" in run._fmt_env(env)
    assert run._fmt_env({}) == "default (none set)"


def test_the_rules_bench_names_real_rules_and_its_programs_differentiate(monkeypatch):
    """bench/rules.py: every rule it toggles is a constant some gradjit module decides by
    (a renamed threshold fails here, not silently in the bench), and each of its extra
    programs gives gradients equal to central differences (interpreted: no compile)."""
    monkeypatch.setenv("GRADJIT_EXECUTOR", "numpy")
    monkeypatch.syspath_prepend(os.path.dirname(BENCH))
    import gradjit as gj
    import gradjit.lowering.codegen_cpu  # noqa: F401
    import gradjit.lowering.schedule_rows  # noqa: F401
    from bench import rules
    mods = [m for m in list(sys.modules.values()) if getattr(m, "__name__", "").startswith("gradjit.")]
    for rule, (off, _) in rules.RULES.items():
        assert any(rule in vars(m) for m in mods), rule
        eval(off)
    for name in rules.EXTRA:
        fn, args, wrt = rules.program(name)
        grads = gj.grad(fn, argnums=wrt)(*args)
        grads = grads if isinstance(grads, tuple) else (grads,)
        for i, g in zip(wrt, grads):
            a = args[i]
            k = np.unravel_index(np.argmax(np.abs(g)), g.shape)
            h = 1e-3 if a.dtype == np.float32 else 1e-6
            up, dn = [x.copy() for x in args], [x.copy() for x in args]
            up[i][k] += h
            dn[i][k] -= h
            fd = (float(fn(*up)) - float(fn(*dn))) / (2 * h)
            assert fd == pytest.approx(float(g[k]), rel=2e-2 if a.dtype == np.float32 else 1e-5,
                                       abs=1e-6), (name, i)
