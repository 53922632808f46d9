"""Benchmark gradjit's gradients against other engines, in the same run.

Usage: python bench/run.py [--quick] [--engines E ...] [--workloads W ...] [--json PATH]

Contract
- Workloads (float64):
  W1  ``sum(tanh(x*w + b)**2)`` on 100 elements, gradient w.r.t. (w, b): per-call overhead.
  W2  a 20-op chain: 19 elementwise ops (sin, exp, log(1+x*x), tanh, sqrt(x*x+1),
      division, sigmoid, mul, add ...) then sum, on 1e6 elements with --quick, else
      1e7, gradient w.r.t. x: throughput, fusion.
  compile  gradjit's cold compile of W1 in a fresh process with an empty temporary
      $GRADJIT_CACHE_DIR (time to the first gradient, after import), then a second
      fresh process on that warm cache, which must compile nothing (from gj.stats()).
- Engines: ``numpy`` (hand-written gradient: the reference), ``gradjit-jit``
  (``gj.grad``), ``gradjit-tensor`` (eager forward + compiled ``.backward()``), and,
  when importable, ``jax`` (``jax.jit(jax.grad)``, x64) and ``torch`` (eager autograd).
- Before timing, the NumPy reference is checked against central finite differences
  and every engine's gradient against the reference; an engine that disagrees is
  reported as FAILED and not timed.
- Timing: the first call (set-up, compilation) and two warm-up calls, then the
  engines take turns, a batch of calls each per round, within a time budget (many
  calls for W1, few for W2), so machine noise hits every engine alike. Reported: median and min-max
  time per gradient call, and each engine's median over gradjit-jit's median
  (> 1: slower than gradjit-jit), and the first call (set-up and compilation; for
  gradjit it may come from the disk cache). Prints a markdown table; --json writes the
  numbers. Exit status 1 if any check failed. --quick stays under ~2 minutes.
- All engines share one process, so OMP_WAIT_POLICY defaults to PASSIVE (set before
  any engine loads): otherwise the OpenMP pools of Numba and torch spin after each
  parallel region and steal cores from whichever engine runs next (seen here: torch
  W2 5x slower on 2 cores). Set it yourself to override.
- Ratios only mean something within one run, on one machine: nothing here is a
  pass/fail threshold on time.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from types import SimpleNamespace

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before any OpenMP runtime starts

import numpy as np  # noqa: E402

ENGINES = ["numpy", "gradjit-jit", "gradjit-tensor", "jax", "torch"]
WORKLOADS = ["W1", "W2", "compile"]


# -- workloads, written once over a namespace of elementwise functions -----------------------
def w1(x, w, b, m):
    return (m.tanh(x * w + b) ** 2).sum()


def w2(x, m):
    a = m.sin(x)
    b = m.exp(-(a * a))
    c = m.log(1 + x * x)
    d = m.tanh(c - b)
    e = m.sqrt(x * x + 1)
    f = d / e
    g = m.sigmoid(f * 3 + a)
    return (g * c + b * d).sum()


NP = SimpleNamespace(sin=np.sin, exp=np.exp, log=np.log, tanh=np.tanh, sqrt=np.sqrt,
                     sigmoid=lambda u: 1 / (1 + np.exp(-u)))
GJ = SimpleNamespace(sin=np.sin, exp=np.exp, log=np.log, tanh=np.tanh, sqrt=np.sqrt,
                     sigmoid=lambda u: u.sigmoid())


def w1_grad_numpy(x, w, b):
    t = np.tanh(x * w + b)
    d = 2 * t * (1 - t * t)
    return d * x, d


def w2_grad_numpy(x):
    a = np.sin(x)
    b = np.exp(-(a * a))
    q = 1 + x * x
    c = np.log(q)
    d = np.tanh(c - b)
    e = np.sqrt(q)
    g = NP.sigmoid(d / e * 3 + a)
    gu = c * g * (1 - g)                    # through g = sigmoid(u), u = 3 f + a
    gf = 3 * gu
    gd = b + gf / e
    gcb = gd * (1 - d * d)                  # through d = tanh(c - b)
    gc = g + gcb
    gb = d - gcb
    ga = gu - 2 * a * b * gb
    return gc * 2 * x / q - gf * d / (e * e) * x / e + ga * np.cos(x)


def make_inputs(name, n):
    rng = np.random.default_rng(0)
    if name == "W1":
        return [rng.standard_normal(n), rng.standard_normal(n), rng.standard_normal(n)]
    return [rng.standard_normal(n)]


# -- engines: each returns a function args -> tuple of gradient arrays, or None ----------------
def engine_numpy(name):
    if name == "W1":
        return w1_grad_numpy
    return lambda x: (w2_grad_numpy(x),)


def engine_gradjit_jit(name):
    import gradjit as gj
    if name == "W1":
        return gj.grad(lambda x, w, b: w1(x, w, b, GJ), argnums=(1, 2))
    return gj.grad(lambda x: w2(x, GJ), argnums=(0,))


def engine_gradjit_tensor(name):
    import gradjit as gj

    def run(*arrays):
        ts = [gj.from_numpy(a) for a in arrays]
        wrt = ts[1:] if name == "W1" else ts
        for t in wrt:
            t.requires_grad_()
        (w1(*ts, GJ) if name == "W1" else w2(*ts, GJ)).backward()
        return tuple(np.asarray(t.grad) for t in wrt)
    return run


def engine_jax(name):
    try:
        import jax
        jax.config.update("jax_enable_x64", True)
        import jax.numpy as jnp
    except Exception:
        return None
    m = SimpleNamespace(sin=jnp.sin, exp=jnp.exp, log=jnp.log, tanh=jnp.tanh, sqrt=jnp.sqrt,
                        sigmoid=jax.nn.sigmoid)
    f = (jax.jit(jax.grad(lambda x, w, b: w1(x, w, b, m), argnums=(1, 2))) if name == "W1"
         else jax.jit(jax.grad(lambda x: w2(x, m), argnums=(0,))))
    return lambda *a: tuple(np.asarray(r) for r in jax.block_until_ready(f(*a)))


def engine_torch(name):
    try:
        import torch
    except Exception:
        return None
    m = SimpleNamespace(sin=torch.sin, exp=torch.exp, log=torch.log, tanh=torch.tanh,
                        sqrt=torch.sqrt, sigmoid=torch.sigmoid)

    def run(*arrays):
        ts = [torch.from_numpy(a) for a in arrays]
        wrt = ts[1:] if name == "W1" else ts
        for t in wrt:
            t.requires_grad_()
        (w1(*ts, m) if name == "W1" else w2(*ts, m)).backward()
        return tuple(t.grad.numpy() for t in wrt)
    return run


MAKERS = {"numpy": engine_numpy, "gradjit-jit": engine_gradjit_jit,
          "gradjit-tensor": engine_gradjit_tensor, "jax": engine_jax, "torch": engine_torch}


# -- measuring ----------------------------------------------------------------------------------
def check_reference():
    """The hand-written gradients against central finite differences (small inputs)."""
    for name, f, g in [("W1", lambda *a: w1(*a, NP), lambda *a: w1_grad_numpy(*a)),
                       ("W2", lambda x: w2(x, NP), lambda x: (w2_grad_numpy(x),))]:
        args = make_inputs(name, 7)
        wrt = [1, 2] if name == "W1" else [0]
        for k, i in enumerate(wrt):
            fd = np.empty(7)
            for j in range(7):
                e = np.zeros(7)
                e[j] = 1e-6
                hi, lo = list(args), list(args)
                hi[i], lo[i] = args[i] + e, args[i] - e
                fd[j] = (f(*hi) - f(*lo)) / 2e-6
            assert np.allclose(g(*args)[k], fd, rtol=1e-6, atol=1e-7), f"{name}: reference wrong"


def timed(fns, args, budget, min_reps, max_reps):
    """Per-call times of each fn, interleaved: in each round every engine runs a batch of
    ~10 ms, so a slow phase of the machine hits all engines alike (ratios stay fair)."""
    batch = {}
    for k, fn in fns.items():
        t0 = time.perf_counter()
        for _ in range(2):                     # warm-up
            fn(*args)
        batch[k] = int(min(max(0.01 / ((time.perf_counter() - t0) / 2), 1), 1000))
    times = {k: [] for k in fns}
    end = time.perf_counter() + budget * len(fns)

    def more(k):
        n = len(times[k])
        return n < max_reps and (n < min_reps or time.perf_counter() < end)
    while any(more(k) for k in fns):
        for k, fn in fns.items():
            for _ in range(batch[k] if more(k) else 0):
                t0 = time.perf_counter()
                fn(*args)
                times[k].append(time.perf_counter() - t0)
    return {k: np.array(v) for k, v in times.items()}


def bench_workload(name, n, engines, quick):
    args = make_inputs(name, n)
    ref = engine_numpy(name)(*args)
    budget, min_reps, max_reps = ((0.5 if quick else 2.0), 50, 20000) if name == "W1" else \
        ((2.0 if quick else 10.0), 5, 30)
    rows, fns = [], {}
    for eng in engines:
        row = {"workload": name, "n": n, "engine": eng}
        t0 = time.perf_counter()
        fn = MAKERS[eng](name)
        if fn is None:
            continue                           # not installed
        rows.append(row)
        try:
            got = fn(*args)
            row["first_call_s"] = time.perf_counter() - t0
            err = max(float(np.max(np.abs(np.asarray(g) - r))) for g, r in zip(got, ref))
            ok = all(np.allclose(g, r, rtol=1e-8, atol=1e-10) for g, r in zip(got, ref))
        except Exception as e:                # noqa: BLE001 - report, keep benchmarking
            row["status"] = f"FAILED: {type(e).__name__}: {e}"[:200]
            continue
        row["max_abs_err"] = err
        if not ok:
            row["status"] = f"FAILED: gradient differs from numpy by {err:.3g}"
            continue
        row["status"] = "ok"
        fns[eng] = fn
    measured = timed(fns, args, budget, min_reps, max_reps)
    for row in rows:
        t = measured.get(row["engine"])
        if t is None:
            continue
        row.update(reps=len(t), median_us=float(np.median(t) * 1e6),
                   min_us=float(t.min() * 1e6), max_us=float(t.max() * 1e6))
        print(f"  {name} {row['engine']:15s} median {row['median_us']:12.1f} µs  ({len(t)} reps)",
              file=sys.stderr)
    base = next((r["median_us"] for r in rows if r["engine"] == "gradjit-jit" and "median_us" in r),
                None)
    for r in rows:
        if base and "median_us" in r:
            r["ratio_vs_gradjit_jit"] = r["median_us"] / base
    return rows


CHILD = """
import json, sys, time
t0 = time.perf_counter()
import gradjit as gj
t1 = time.perf_counter()
sys.path.insert(0, {bench_dir!r})
import run as bench
g = bench.engine_gradjit_jit("W1")
x, w, b = bench.make_inputs("W1", 100)
dw, db = g(x, w, b)
t2 = time.perf_counter()
ref = bench.w1_grad_numpy(x, w, b)
assert bench.np.allclose(dw, ref[0]) and bench.np.allclose(db, ref[1])
print(json.dumps(dict(import_s=t1 - t0, first_grad_s=t2 - t1, stats=gj.stats())))
"""


def bench_compile():
    """Cold compile of W1 in a fresh process on an empty cache, then a warm-cache process."""
    out = {}
    with tempfile.TemporaryDirectory(prefix="gradjit-bench-cache-") as cache:
        env = {k: v for k, v in os.environ.items() if k != "GRADJIT_EXECUTOR"}
        env["GRADJIT_CACHE_DIR"] = cache
        code = CHILD.format(bench_dir=os.path.dirname(os.path.abspath(__file__)))
        for phase in ("cold", "warm"):
            r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                               text=True, timeout=600)
            if r.returncode != 0:
                raise RuntimeError(f"{phase} compile process failed:\n{r.stderr}")
            out[phase] = json.loads(r.stdout.strip().splitlines()[-1])
    cold, warm = out["cold"]["stats"], out["warm"]["stats"]
    out["ok"] = cold["compiles"] >= 1 and warm["compiles"] == 0 and warm["disk_hits"] >= 1
    return out


def table(rows):
    lines = ["| workload | engine | median µs/call | min–max µs | reps | × gradjit-jit "
             "| first call ms |", "|---|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        n = f"{r['n']:.0e}" if r["n"] >= 1e5 else r["n"]
        wl = f"{r['workload']} (n={n})"
        if r.get("status") != "ok":
            lines.append(f"| {wl} | {r['engine']} | {r['status']} | | | | |")
            continue
        ratio = r.get("ratio_vs_gradjit_jit")
        lines.append(f"| {wl} | {r['engine']} | {r['median_us']:.1f} | {r['min_us']:.1f}–"
                     f"{r['max_us']:.1f} | {r['reps']} | {'' if ratio is None else f'{ratio:.2f}'} "
                     f"| {r['first_call_s'] * 1e3:.1f} |")
    return "\n".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="W2 on 1e6 elements, shorter budgets")
    p.add_argument("--engines", nargs="+", choices=ENGINES, default=ENGINES)
    p.add_argument("--workloads", nargs="+", choices=WORKLOADS, default=WORKLOADS)
    p.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    a = p.parse_args(argv)
    started = time.perf_counter()
    check_reference()
    engines = ["numpy"] + [e for e in a.engines if e != "numpy"]  # the reference runs first
    results = {"machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs",
               "python": platform.python_version(), "numpy": np.__version__, "quick": a.quick,
               "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"), "rows": []}
    for wl in [w for w in ("W1", "W2") if w in a.workloads]:
        n = 100 if wl == "W1" else (10**6 if a.quick else 10**7)
        results["rows"] += bench_workload(wl, n, engines, a.quick)
    skipped = [e for e in engines if not any(r["engine"] == e for r in results["rows"])]
    print(f"\n## gradjit benchmark ({'quick' if a.quick else 'full'}): {results['machine']}, "
          f"Python {results['python']}, NumPy {results['numpy']}, "
          f"OMP_WAIT_POLICY={results['omp_wait_policy']}\n")
    if results["rows"]:
        print(table(results["rows"]))
    if skipped and results["rows"]:
        print(f"\nnot installed (skipped): {', '.join(skipped)}")
    failed = any(r.get("status") != "ok" for r in results["rows"])
    if "compile" in a.workloads:
        c = results["compile"] = bench_compile()
        cold, warm = c["cold"], c["warm"]
        print(f"\ngradjit W1 compile, fresh process, empty cache: first gradient "
              f"{cold['first_grad_s']:.2f} s after import (import {cold['import_s']:.2f} s; "
              f"compile_seconds {cold['stats']['compile_seconds']:.2f}; "
              f"compiles={cold['stats']['compiles']})")
        print(f"gradjit W1, second fresh process, warm cache: first gradient "
              f"{warm['first_grad_s']:.3f} s after import; compiles={warm['stats']['compiles']} "
              f"disk_hits={warm['stats']['disk_hits']} "
              f"({'compiled nothing: OK' if c['ok'] else 'FAILED: expected no compiles'})")
        failed |= not c["ok"]
    print(f"\ntotal bench time {time.perf_counter() - started:.0f} s")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=2)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
