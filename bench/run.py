"""Benchmark gradjit's gradients against other engines, in the same run.

Usage: python bench/run.py [--quick] [--engines E ...] [--workloads W ...] [--json PATH]
                           [--png PATH] [--compile-cap S]

Contract
- Workloads (bench/workloads.py): W1 tiny elementwise (100 float64, per-call overhead),
  W2 a 20-op elementwise chain on 1e7 float64 (1e6 with --quick), W3 MLP 784-512-512-10
  tanh, batch 256, softmax cross-entropy, float32, W4 tanh RNN hidden 32, input 8,
  batch 1, 100 steps as a Python loop, W5 least squares, X 10000x100, W6 single-head
  self-attention, X 512x64, float32, W7 Lennard-Jones energy of 256 particles (all pairs
  by broadcasting), W8 matrix factorisation with integer-array indexing (gather /
  scatter-add), U 1000x32, V 800x32, 20000 pairs.
- Engines: ``numpy`` (hand-written gradient: the reference), ``numba`` (hand-written
  ``@njit`` gradient: the practical limit), ``gradjit-jit`` (``gj.grad``),
  ``gradjit-tensor`` (eager forward + compiled ``.backward()``), and when importable
  ``jax`` (``jax.jit(jax.grad)``, x64 on), ``torch`` (eager autograd, ``.backward()``)
  and ``autograd`` (HIPS ``autograd.grad``). Each engine gets the inputs in its native
  form, prepared once outside the timing (jax device arrays, torch/gradjit leaf tensors,
  the RNN sequence stacked for the Numba kernel); a timed call is one gradient, blocked
  until ready (tensor engines: forward + ``backward()`` with ``.grad`` reset to None).
- Checks first: the hand-written NumPy and Numba gradients against central finite
  differences on tiny float64 instances, then every engine's gradient against NumPy's
  (max error over max |reference| <= 1e-8 for float64, 1e-4 for float32). An engine that
  disagrees is reported FAILED and not timed; the exit status is then 1.
- Fresh processes (phase 1, per engine and workload): a cold process with empty caches
  (an empty temporary $GRADJIT_CACHE_DIR for gradjit, $NUMBA_CACHE_DIR for numba; jax's
  default, which keeps no persistent cache) times the import of the engine and the first
  gradient after it, then measures the peak memory of one later gradient call; a second
  process on the same caches does it again (with --quick only for the engines that keep
  disk caches: gradjit, numba). gradjit's first gradient of a new structure comes from
  its NumPy interpreter while Numba compiles in the background (tiering, gradjit's
  default): the child then waits for that compile and reports when the compiled code
  was ready too (``compiled_s``, from the same start). gradjit's warm process must
  compile nothing. A third gradjit process measures a *new program* on a used machine: the
  cold cache less the program's own entries (the library helpers' code, compiled once per
  machine and shared by every program, stays). A cold
  process that exceeds --compile-cap seconds (gradjit's unrolled W4) is killed and
  reported as such; the engine is then not timed on that workload. The timing phase
  reuses the caches the cold processes filled, so it does not compile again.
- Peak memory: Python's tracemalloc does not see Numba's, BLAS's or XLA's allocations, so
  the child runs with glibc's MALLOC_MMAP_THRESHOLD_ fixed at 128 KiB (every large block
  is mmap-ed on malloc and unmapped on free, in every engine's allocator that uses malloc),
  resets the kernel's resident high-water mark (``echo 5 > /proc/self/clear_refs``) after
  two warm-up calls, runs one gradient and reports VmHWM - VmRSS-before: the extra
  resident memory of one call, outputs included. Linux only (else "n/a").
- Timing (phase 2, one process): the first call and two warm-up calls, then the engines
  take turns, a ~50 ms batch of calls each per round (sized from one more, warm, call),
  with 0.15 s of idling after each batch (the engine's idle pools go to sleep before the
  next engine runs, as for a user running one engine), within a time budget, so machine
  noise hits them alike. Reported: median and min-max per call, repetitions, and each
  engine's median over gradjit-jit's (> 1: slower than gradjit-jit).
- Output: markdown tables on stdout, a progress line per cell on stderr, the numbers as
  JSON (--json, default bench/results/bench[-quick].json), a PNG bar chart (--png,
  default bench/results/bench[-quick].png) when matplotlib is importable (optional
  extra ``bench``).
- The user's default environment: nothing here sets OMP_*, OPENBLAS_*, MKL_* or NUMBA_*
  (each engine sizes its own threads, as it does for a user); the environment variables
  that steer threads are recorded in the JSON (``env``). --threads N caps them all.
- --busy: after the quiet timing of a workload, the same engines are timed again while
  another process spins on one core (as when a machine is shared), and a second table
  gives each engine's busy median over its quiet median.
- Ratios only mean something within one run, on one machine: nothing here is a pass/fail
  threshold on time.
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from operator import attrgetter, itemgetter
from types import SimpleNamespace

if "--threads" in sys.argv[:-1]:                     # before NumPy, Numba, BLAS, torch load
    _n = sys.argv[sys.argv.index("--threads") + 1]
    for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
        os.environ[_v] = _n
    if _n == "1":
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_cpu_multi_thread_eigen"
                                   "=false intra_op_parallelism_threads=1").strip()

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import workloads as W  # noqa: E402

ENGINES = ["numpy", "numba", "gradjit-jit", "gradjit-tensor", "jax", "torch", "autograd"]
WORKLOADS = list(W.SPEC)
DISK_CACHED = {"gradjit-jit", "gradjit-tensor", "numba"}   # engines with a persistent cache
IMPORTS = {"numpy": "numpy", "numba": "numba", "gradjit-jit": "gradjit",
           "gradjit-tensor": "gradjit", "jax": "jax", "torch": "torch", "autograd": "autograd"}

# per workload: (time budget per engine in s, min reps, max reps), quick / full
BUDGET = {"W1": ((0.5, 50, 20000), (2.0, 50, 20000)), "W2": ((2.0, 5, 30), (10.0, 5, 30)),
          "W3": ((1.5, 10, 2000), (4.0, 10, 2000)), "W4": ((1.0, 20, 20000), (3.0, 20, 20000)),
          "W5": ((1.0, 20, 20000), (3.0, 20, 20000)), "W6": ((1.5, 10, 2000), (4.0, 10, 2000)),
          "W7": ((1.0, 10, 5000), (3.0, 10, 5000)), "W8": ((1.0, 10, 5000), (3.0, 10, 5000))}


# -- engines: make(name) -> Engine, or None when not importable ---------------------------------
class Engine(SimpleNamespace):
    """prepare(args) -> native args (untimed); call(*native) -> result (timed, blocking);
    to_numpy(result) -> tuple of NumPy gradients; release(native) drops what the engine
    keeps from the last call (tensor engines: .grad), before a memory measurement."""
    release = staticmethod(lambda native: None)


def _ident(r):
    return tuple(np.asarray(g) for g in r)


def engine_numpy(name):
    return Engine(prepare=list, call=W.SPEC[name]["ref"], to_numpy=_ident)


def engine_numba(name):
    try:
        from numba_grads import numba_grad
    except Exception:                          # noqa: BLE001
        return None
    prep = (lambda a: a[:4] + [np.stack(a[4:])]) if name == "W4" else list
    return Engine(prepare=prep, call=numba_grad(name), to_numpy=_ident)


def _gj_namespace():
    return SimpleNamespace(sin=np.sin, exp=np.exp, log=np.log, tanh=np.tanh, sqrt=np.sqrt,
                           sigmoid=lambda u: u.sigmoid(), log_softmax=lambda z: z.log_softmax(1),
                           softmax=lambda z: z.softmax(1))


def engine_gradjit_jit(name):
    import gradjit as gj
    s, m = W.SPEC[name], _gj_namespace()
    return Engine(prepare=list, call=gj.grad(lambda *a: s["f"](m, *a), argnums=s["wrt"]),
                  to_numpy=_ident)


_GRAD = attrgetter("grad")


def _tensor_engine(name, lib, leaf, m):
    """Tensor-mode engines (gradjit tensor, torch): persistent leaf tensors, one forward +
    backward() per call, .grad reset to None first (as zero_grad(set_to_none=True))."""
    s = W.SPEC[name]

    def prepare(args):
        ts = [leaf(a) for a in args]
        for i in s["wrt"]:
            ts[i].requires_grad_()
        return ts

    f, wrt = s["f"], tuple(s["wrt"])
    pick = itemgetter(*wrt) if len(wrt) > 1 else (lambda ts: (ts[wrt[0]],))

    def call(*ts):   # (lean: the harness's own time counts for every tensor engine alike)
        ws = pick(ts)
        for t in ws:
            t.grad = None
        f(m, *ts).backward()
        return tuple(map(_GRAD, ws))

    def release(ts):
        for i in s["wrt"]:
            ts[i].grad = None
    return Engine(prepare=prepare, call=call, to_numpy=lib, release=release)


def engine_gradjit_tensor(name):
    import gradjit as gj
    return _tensor_engine(name, _ident, gj.from_numpy, _gj_namespace())


def engine_torch(name):
    try:
        import torch
    except Exception:                          # noqa: BLE001
        return None
    m = SimpleNamespace(sin=torch.sin, exp=torch.exp, log=torch.log, tanh=torch.tanh,
                        sqrt=torch.sqrt, sigmoid=torch.sigmoid,
                        log_softmax=lambda z: torch.log_softmax(z, 1),
                        softmax=lambda z: torch.softmax(z, 1))
    return _tensor_engine(name, lambda r: tuple(g.numpy() for g in r), torch.from_numpy, m)


def engine_jax(name):
    try:
        import jax
        jax.config.update("jax_enable_x64", True)  # float64 workloads stay float64, W3 float32
        import jax.numpy as jnp
    except Exception:                          # noqa: BLE001
        return None
    s = W.SPEC[name]
    m = SimpleNamespace(sin=jnp.sin, exp=jnp.exp, log=jnp.log, tanh=jnp.tanh, sqrt=jnp.sqrt,
                        sigmoid=jax.nn.sigmoid, log_softmax=lambda z: jax.nn.log_softmax(z, 1),
                        softmax=lambda z: jax.nn.softmax(z, 1))
    f = jax.jit(jax.grad(lambda *a: s["f"](m, *a), argnums=s["wrt"]))
    return Engine(prepare=lambda a: [jax.device_put(x) for x in a],
                  call=lambda *a: jax.block_until_ready(f(*a)), to_numpy=_ident)


def engine_autograd(name):
    try:
        import autograd
        import autograd.numpy as anp
    except Exception:                          # noqa: BLE001
        return None
    s = W.SPEC[name]

    def log_softmax(z):
        t = z - anp.max(z, 1, keepdims=True)
        return t - anp.log(anp.sum(anp.exp(t), 1, keepdims=True))

    def softmax(z):
        e = anp.exp(z - anp.max(z, 1, keepdims=True))
        return e / anp.sum(e, 1, keepdims=True)
    m = SimpleNamespace(sin=anp.sin, exp=anp.exp, log=anp.log, tanh=anp.tanh, sqrt=anp.sqrt,
                        sigmoid=lambda u: 1 / (1 + anp.exp(-u)), log_softmax=log_softmax,
                        softmax=softmax)
    g = autograd.grad(lambda *a: s["f"](m, *a), argnum=s["wrt"])
    return Engine(prepare=list, call=g, to_numpy=_ident)


MAKERS = {"numpy": engine_numpy, "numba": engine_numba, "gradjit-jit": engine_gradjit_jit,
          "gradjit-tensor": engine_gradjit_tensor, "jax": engine_jax, "torch": engine_torch,
          "autograd": engine_autograd}


def importable(engine):
    import importlib.util
    return importlib.util.find_spec(IMPORTS[engine]) is not None


def rel_err(got, ref):
    """Max over the gradients of max |got - ref| / max |ref|."""
    return max(float(np.max(np.abs(np.asarray(g, np.float64) - r)) / max(np.max(np.abs(r)), 1e-300))
               for g, r in zip(got, ref))


def tolerance(name):
    return 1e-4 if W.SPEC[name]["dtype"] == "float32" else 1e-8


# -- phase 1: fresh processes (cold / warm first gradient, peak memory) -------------------------
def _status_kib():
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            if k in ("VmRSS", "VmHWM"):
                out[k] = int(v.split()[0])
    return out


def child(engine, name, quick):
    """Runs in a fresh process: prints one JSON line."""
    t0 = time.perf_counter()
    __import__(IMPORTS[engine])
    t1 = time.perf_counter()
    args = W.make_inputs(name, quick=quick)
    t2 = time.perf_counter()
    e = MAKERS[engine](name)
    native = e.prepare(args)
    first = e.call(*native)
    t3 = time.perf_counter()
    out = dict(import_s=t1 - t0, first_grad_s=(t3 - t2))
    if engine.startswith("gradjit"):
        import gradjit as gj
        gj.wait_compiled()          # tiering: the first result came from the interpreter
        out["compiled_s"] = time.perf_counter() - t2    # ... until the compiled code is ready
        out["stats"] = gj.stats()
    del first
    for _ in range(2):
        e.call(*native)
    e.release(native)
    gc.collect()
    try:
        before = _status_kib()["VmRSS"]
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")                        # reset the resident high-water mark
        r = e.call(*native)
        out["peak_mib"] = (_status_kib()["VmHWM"] - before) / 1024
        del r
    except OSError as err:
        out["peak_mib"] = None
        out["peak_note"] = f"n/a ({err.__class__.__name__})"
    print(json.dumps(out))


def run_child(engine, name, quick, cache, cap):
    env = {k: v for k, v in os.environ.items() if k != "GRADJIT_EXECUTOR"}
    env["GRADJIT_CACHE_DIR"] = cache
    if engine == "numba":
        env["NUMBA_CACHE_DIR"] = cache
    env["MALLOC_MMAP_THRESHOLD_"] = "131072"    # fixed: large blocks go back to the OS on free
    cmd = [sys.executable, os.path.abspath(__file__), "--child", engine, name]
    if quick:
        cmd.append("--quick")
    t0 = time.perf_counter()
    try:
        r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=cap)
    except subprocess.TimeoutExpired:
        return {"timed_out_s": cap}
    wall = time.perf_counter() - t0
    if r.returncode != 0:
        return {"error": (r.stderr.strip().splitlines() or ["?"])[-1][:200]}
    out = json.loads(r.stdout.strip().splitlines()[-1])
    out["process_wall_s"] = wall
    return out


def _helpers_only(cache):
    """A copy of ``cache`` without the program's own entries (its generated modules, their
    Numba files and link records, its plans): what a new program finds on a machine where
    gradjit ran before. The library helpers' compiled code (shared by every program,
    compiled once per machine) and the dir's key stay."""
    import shutil
    dst = cache + "-new"
    shutil.copytree(cache, dst, symlinks=True)
    for sub in ("", "numba", "locks"):
        d = os.path.join(dst, sub)
        for n in os.listdir(d) if os.path.isdir(d) else ():
            if n.startswith(("gj_", "gjc_")):
                os.unlink(os.path.join(d, n))
    shutil.rmtree(os.path.join(dst, "plans"), ignore_errors=True)
    return dst


def fresh_phase(engines, workloads, quick, cap, root, progress):
    rows = []
    for name in workloads:
        for eng in engines:
            cache = os.path.join(root, f"{name}-{eng}")
            os.makedirs(cache, exist_ok=True)
            row = {"workload": name, "engine": eng, "cache": cache}
            limit = cap if eng.startswith("gradjit") else max(cap, 600)
            row["cold"] = run_child(eng, name, quick, cache, limit)
            if (eng in DISK_CACHED or not quick) and "first_grad_s" in row["cold"]:
                row["warm"] = run_child(eng, name, quick, cache, limit)
            if eng.startswith("gradjit") and "warm" in row:
                st = row["warm"].get("stats", {})
                row["warm_ok"] = st.get("compiles") == 0 and st.get("disk_hits", 0) >= 1
                row["new"] = run_child(eng, name, quick, _helpers_only(cache), limit)
            progress(f"{name} {eng}: cold {_fmt_first(row['cold'])}, warm "
                     f"{_fmt_first(row.get('warm', {}))}, peak {_fmt_mib(row['cold'])}")
            rows.append(row)
    return rows


def _fmt_first(c):
    if "timed_out_s" in c:
        return f"> {c['timed_out_s']:.0f} s (killed)"
    if "error" in c:
        return f"error: {c['error']}"
    return f"{c['first_grad_s']:.3f} s" if "first_grad_s" in c else "—"


def _fmt_mib(c):
    return "—" if c.get("peak_mib") is None else f"{c['peak_mib']:.1f} MiB"


# -- phase 2: timing in one process -------------------------------------------------------------
# Between two engines' batches the process idles this long: the thread pools of the engine
# that ran (OpenBLAS's workers spin about 0.1 s after a call) are asleep before the next
# engine starts, as they are for a user who runs one engine. Without the gap, each engine
# ran beside the previous one's spinning BLAS workers: W3's medians 2x (JAX, NumPy) to 15x
# (Numba, gradjit) their own in one run.
GAP_S = 0.15


def timed(fns, budget, min_reps, max_reps):
    """Per-call times of each fn, interleaved: in each round every engine runs a batch of
    ~50 ms, then the process idles GAP_S, so a slow phase of the machine hits all engines
    alike (ratios stay fair) and no engine runs beside another's idle pools."""
    batch = {}
    for k, fn in fns.items():
        for _ in range(2):                     # warm-up: first calls load, compile, allocate
            fn()
        t0 = time.perf_counter()               # sized from a warm call (sized from the
        fn()                                   # warm-up, most W1 engines got 1 call a round)
        batch[k] = int(min(max(0.05 / (time.perf_counter() - t0), 1), 5000))
        time.sleep(GAP_S)
    times = {k: [] for k in fns}
    spent = dict.fromkeys(fns, 0.0)            # each engine's budget: its own calls' time

    def more(k):
        n = len(times[k])
        return n < max_reps and (n < min_reps or spent[k] < budget)
    while any(more(k) for k in fns):
        for k, fn in fns.items():
            if not more(k):
                continue
            for _ in range(batch[k]):
                t0 = time.perf_counter()
                fn()
                times[k].append(time.perf_counter() - t0)
            spent[k] += sum(times[k][-batch[k]:])
            time.sleep(GAP_S)
    return {k: np.array(v) for k, v in times.items()}


def spinner():
    """Another process keeping one core busy (a pure-Python loop), until killed."""
    p = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    time.sleep(0.5)                            # (started, and seen by the schedulers)
    return p


def bench_workload(name, engines, quick, fresh, progress, busy=False):
    args = W.make_inputs(name, quick=quick)
    ref = W.SPEC[name]["ref"](*args)
    budget, min_reps, max_reps = BUDGET[name][0 if quick else 1]
    rows, fns = [], {}
    for eng in engines:
        row = {"workload": name, "engine": eng}
        fr = fresh.get((name, eng), {})
        if "timed_out_s" in fr.get("cold", {}):
            row["status"] = (f"not timed: cold first gradient > {fr['cold']['timed_out_s']:.0f} s "
                             "(killed at the cap)")
            rows.append(row)
            progress(f"{name} {eng}: {row['status']}")
            continue
        if fr.get("cache") and eng.startswith("gradjit"):
            os.environ["GRADJIT_CACHE_DIR"] = fr["cache"]   # what the cold process compiled
        try:
            t0 = time.perf_counter()
            e = MAKERS[eng](name)
            if e is None:
                continue                       # not installed
            rows.append(row)
            native = e.prepare(args)
            fn = (lambda e=e, native=native: e.call(*native))
            got = e.to_numpy(fn())
            row["first_call_s"] = time.perf_counter() - t0
            err = row["max_rel_err"] = rel_err(got, ref)
        except Exception as ex:                # noqa: BLE001 - report, keep benchmarking
            row["status"] = f"FAILED: {type(ex).__name__}: {ex}"[:200]
            progress(f"{name} {eng}: {row['status']}")
            continue
        if not err <= tolerance(name):
            row["status"] = f"FAILED: gradient differs from numpy by {err:.3g} (relative)"
            progress(f"{name} {eng}: {row['status']}")
            continue
        row["status"] = "ok"
        fns[eng] = fn
    measured = timed(fns, budget, min_reps, max_reps)
    loaded = {}
    if busy and fns:
        spin = spinner()
        try:
            loaded = timed(fns, budget, min_reps, max_reps)
        finally:
            spin.kill()
            spin.wait()
    for row in rows:
        t = measured.get(row["engine"])
        if t is None:
            continue
        row.update(reps=len(t), median_us=float(np.median(t) * 1e6),
                   min_us=float(t.min() * 1e6), max_us=float(t.max() * 1e6))
        progress(f"{name} {row['engine']}: median {row['median_us']:.1f} µs ({len(t)} reps)")
        if row["engine"] in loaded:
            b = loaded[row["engine"]]
            row.update(busy_median_us=float(np.median(b) * 1e6), busy_reps=len(b))
            row["busy_over_quiet"] = row["busy_median_us"] / row["median_us"]
            progress(f"{name} {row['engine']}: one core busy: median {row['busy_median_us']:.1f}"
                     f" µs ({row['busy_over_quiet']:.2f}x quiet)")
    base = next((r["median_us"] for r in rows if r["engine"] == "gradjit-jit" and "median_us" in r),
                None)
    for r in rows:
        if base and "median_us" in r:
            r["ratio_vs_gradjit_jit"] = r["median_us"] / base
    return rows


# -- reporting ----------------------------------------------------------------------------------
def _label(name, quick):
    size = "n=1e6" if (name == "W2" and quick) else W.SPEC[name]["size"]
    return f"{name} ({size}, {W.SPEC[name]['dtype']})"


def _us(x):
    return f"{x:.1f}" if x < 1e5 else f"{x:.4g}"


def time_table(rows, quick):
    lines = ["| workload | engine | median µs/call | min–max µs | reps | × gradjit-jit |",
             "|---|---|---:|---:|---:|---:|"]
    for r in rows:
        wl = _label(r["workload"], quick)
        if r.get("status") != "ok":
            lines.append(f"| {wl} | {r['engine']} | {r['status']} | | | |")
            continue
        ratio = r.get("ratio_vs_gradjit_jit")
        ratio = "" if ratio is None else f"{ratio:.2f}"
        lines.append(f"| {wl} | {r['engine']} | {_us(r['median_us'])} | {_us(r['min_us'])}–"
                     f"{_us(r['max_us'])} | {r['reps']} | {ratio} |")
    return "\n".join(lines)


def busy_table(rows, quick):
    lines = ["| workload | engine | quiet median µs | one core busy: median µs | busy / quiet |",
             "|---|---|---:|---:|---:|"]
    for r in rows:
        if "busy_median_us" in r:
            lines.append(f"| {_label(r['workload'], quick)} | {r['engine']} | {_us(r['median_us'])}"
                         f" | {_us(r['busy_median_us'])} | {r['busy_over_quiet']:.2f} |")
    return "\n".join(lines)


def fresh_table(rows):
    lines = [("| workload | engine | import s | cold: first gradient s | cold: compiled s "
              "| new program: compiled s | warm: first gradient s | peak MiB, one gradient "
              "| gradjit cache (cold → warm) |"),
             "|---|---|---:|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        c, w = r["cold"], r.get("warm", {})
        imp = f"{c['import_s']:.2f}" if "import_s" in c else ""
        note = ""
        if "stats" in c and "stats" in w:
            note = (f"compiles {c['stats']['compiles']} "
                    f"({c['stats']['compile_seconds']:.1f} s) → "
                    f"compiles {w['stats']['compiles']}, disk hits {w['stats']['disk_hits']}"
                    + ("" if r.get("warm_ok") else " FAILED: warm process compiled"))
        elif "stats" in c:
            note = f"compiles {c['stats']['compiles']} ({c['stats']['compile_seconds']:.1f} s)"
        peak = _fmt_mib(c).replace(" MiB", "")
        cold, warm = (_fmt_first(x).replace(" s", "") for x in (c, w))
        done = f"{c['compiled_s']:.3f}" if "compiled_s" in c else ""
        new = r.get("new", {})
        new = f"{new['compiled_s']:.3f}" if "compiled_s" in new else ""
        lines.append(f"| {r['workload']} | {r['engine']} | {imp} | {cold} | {done} | {new} "
                     f"| {warm} | {peak} | {note} |")
    return "\n".join(lines)


def chart(rows, path, quick):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception:                          # noqa: BLE001
        return None
    names = [n for n in WORKLOADS if any(r["workload"] == n and "median_us" in r for r in rows)]
    if not names:
        return None
    fig, axes = plt.subplots(1, len(names), figsize=(3.2 * len(names), 4.2), squeeze=False)
    for ax, name in zip(axes[0], names):
        rs = [r for r in rows if r["workload"] == name and "median_us" in r]
        ys = [r["median_us"] for r in rs]
        bars = ax.bar(range(len(rs)), ys, color=["C3" if r["engine"].startswith("gradjit") else "C0"
                                                 for r in rs])
        ax.set_yscale("log")
        ax.set_xticks(range(len(rs)), [r["engine"] for r in rs], rotation=60, ha="right",
                      fontsize=8)
        ax.set_title(_label(name, quick), fontsize=8)
        for b, r in zip(bars, rs):
            if "ratio_vs_gradjit_jit" in r:
                ax.annotate(f"{r['ratio_vs_gradjit_jit']:.2g}×", (b.get_x() + b.get_width() / 2,
                            b.get_height()), ha="center", va="bottom", fontsize=7)
    axes[0][0].set_ylabel("median µs per gradient (log); label: × gradjit-jit")
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=110)
    return path


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="W2 on 1e6 elements, shorter budgets, "
                   "warm processes only for disk-cached engines, --compile-cap 20")
    p.add_argument("--engines", nargs="+", choices=ENGINES, default=ENGINES)
    p.add_argument("--workloads", nargs="+", choices=WORKLOADS, default=WORKLOADS)
    p.add_argument("--json", metavar="PATH", help="the results as JSON (default "
                   "bench/results/bench[-quick].json; '' for none)")
    p.add_argument("--png", metavar="PATH", help="bar chart (default bench/results/bench[-quick]"
                   ".png; needs matplotlib; '' for none)")
    p.add_argument("--compile-cap", type=float, metavar="S", help="kill a gradjit cold process "
                   "after S seconds (default 300, --quick 20)")
    p.add_argument("--threads", type=int, metavar="N", help="cap every engine's threads "
                   "(OMP, OpenBLAS, MKL, Numba; XLA single-threaded when N=1); default: all cores")
    p.add_argument("--busy", action="store_true", help="also time every workload while "
                   "another process keeps one core busy, and report busy / quiet medians")
    p.add_argument("--child", nargs=2, metavar=("ENGINE", "WORKLOAD"), help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.child:
        return child(*a.child, a.quick)
    started = time.perf_counter()
    cap = a.compile_cap or (20.0 if a.quick else 300.0)
    engines = ["numpy"] + [e for e in a.engines if e != "numpy" and importable(e)]
    skipped = [e for e in a.engines if e not in engines]
    cells = [0]

    def progress(msg):
        cells[0] += 1
        print(f"[{time.perf_counter() - started:6.0f} s] {msg}", file=sys.stderr, flush=True)

    W.check_references(with_numba="numba" in engines)
    progress("hand-written gradients agree with finite differences")
    results = {"machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs",
               "python": platform.python_version(), "numpy": np.__version__, "quick": a.quick,
               "env": _thread_env(), "busy": a.busy, "compile_cap_s": cap,
               "threads": a.threads or os.cpu_count(), "gradjit_path": _gradjit_path(),
               "versions": _versions(engines), "load_avg_start": _load()}
    with tempfile.TemporaryDirectory(prefix="gradjit-bench-") as root:
        fresh_rows = fresh_phase(engines, a.workloads, a.quick, cap, root, progress)
        fresh = {(r["workload"], r["engine"]): r for r in fresh_rows}
        rows = []
        for wl in a.workloads:
            rows += bench_workload(wl, engines, a.quick, fresh, progress, a.busy)
    for r in fresh_rows:
        r.pop("cache", None)
    results.update(rows=rows, fresh=fresh_rows, load_avg_end=_load())
    v = results["versions"]
    print(f"\n## gradjit benchmark ({'quick' if a.quick else 'full'}): {results['machine']}, "
          f"Python {results['python']}, " + ", ".join(f"{k} {x}" for k, x in v.items())
          + f"; thread environment: {_fmt_env(results['env'])}; threads {results['threads']}; "
          f"gradjit from {results['gradjit_path']}; 1-min load average "
          f"{results['load_avg_start']} at the start, {results['load_avg_end']} at the end "
          "(other processes' load slows multi-threaded BLAS most)\n")
    print("### Time per gradient call (one process, engines interleaved)\n")
    print(time_table(rows, a.quick))
    if a.busy:
        print("\n### One core kept busy by another process (a spinning Python loop)\n")
        print(busy_table(rows, a.quick))
    print("\n### Fresh processes: first gradient after import (cold: empty caches, the first "
          "program on a machine; new program: the library helpers' code cached by an earlier "
          "program, the program's own entries not; warm: second process on the caches), and "
          "peak extra resident memory of one gradient call (VmHWM after clear_refs, "
          "MALLOC_MMAP_THRESHOLD_=128K)\n")
    print(fresh_table(fresh_rows))
    if skipped:
        print(f"\nnot installed (skipped): {', '.join(skipped)}")
    failed = any(str(r.get("status", "")).startswith("FAILED") for r in rows)
    failed |= any(r.get("warm_ok") is False for r in fresh_rows)
    failed |= any("error" in r["cold"] for r in fresh_rows)
    stem = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results",
                        "bench-quick" if a.quick else "bench")
    png = a.png if a.png is not None else stem + ".png"
    if png and chart(rows, png, a.quick):
        print(f"\nchart: {png}")
    results["total_s"] = time.perf_counter() - started
    print(f"\ntotal bench time {results['total_s']:.0f} s")
    path = a.json if a.json is not None else stem + ".json"
    if path:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        with open(path, "w") as f:
            json.dump(results, f, indent=2)
        print(f"numbers: {path}")
    return 1 if failed else 0


THREAD_ENV = ("OMP_", "OPENBLAS_", "MKL_", "NUMBA_", "GRADJIT_", "XLA_FLAGS", "GOMP_")


def _thread_env():
    """The environment variables that steer the engines' threads, as this run had them."""
    return {k: v for k, v in sorted(os.environ.items()) if k.startswith(THREAD_ENV)
            and k not in ("GRADJIT_CACHE_DIR", "NUMBA_CACHE_DIR")}


def _fmt_env(env):
    return ", ".join(f"{k}={v}" for k, v in env.items()) or "default (none set)"


def _gradjit_path():
    import importlib.util
    spec = importlib.util.find_spec("gradjit")
    return spec and os.path.dirname(spec.origin)


def _load():
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return None


def _versions(engines):
    out = {"numpy": np.__version__}
    for e in engines:
        mod = IMPORTS[e]
        if mod in out:
            continue
        try:
            from importlib.metadata import version
            out[mod] = version(mod)
        except Exception:                      # noqa: BLE001
            out[mod] = "?"
    return out


if __name__ == "__main__":
    sys.exit(main())
