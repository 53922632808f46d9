"""One prepared script for a machine with a GPU: W1/W2/W3/W5 timing, then CUDA correctness for every op.

Usage: python bench/gpu_check.py [--json PATH] [--budget S] [--skip-ops] [--tiny]

Contract
- Part 1 (correctness): every representative op case of the gradcheck tables
  (``tests/runtime/test_ops_gradcheck.REPS``), the first case of every other op
  name, and the nn cases
  (``tests/cuda/nn_cases.py``), in float64 and float32, through
  ``gj.grad(..., device="cuda")`` against the CPU path: relative error ≤ 1e-10
  (float64) / 1e-5 (float32). Ops with no CUDA rendering are listed as
  ``cpu_only`` (they raise a clear error), not as failures.
- Part 2 (speed): W1 (tiny: per-call latency), W2 (20-op elementwise chain,
  1e7 float64), W3 (MLP 784-512-512-10, batch 256, float32) and W5 (least
  squares, X 10000x100) from ``bench/workloads.py``, inputs
  already on the device; median per gradient call (synchronised) for gradjit
  CUDA, gradjit CPU, and when importable torch CUDA and JAX GPU. W2 also
  reports achieved bandwidth: bytes that must move (read x, write the
  gradient) over time, and its share of the GPU's peak (H200: 4.8 TB/s).
- Speed runs first; the op checks then run within ``--ops-seconds`` (cases past the
  budget are reported ``not_run``): a lent GPU's time is short, and compiling every
  case's kernels takes minutes. The JSON is rewritten after each part.
- Output: a table on stdout and a JSON file (``$OUT/gpu_check.json`` when
  ``$OUT`` is set, else ``gpu_check.json``). Exit status 1 if a case failed.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from types import SimpleNamespace

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT, os.path.join(ROOT, "bench")]

import gradjit as gj  # noqa: E402
import workloads as W  # noqa: E402

PEAK_BW = {"H200": 4.8e12, "H100": 3.35e12, "A100": 2.0e12}


def _median_time(call, sync, budget=2.0, min_reps=5):
    call()
    sync()
    times, t_end = [], time.perf_counter() + budget
    while len(times) < min_reps or time.perf_counter() < t_end:
        t0 = time.perf_counter()
        call()
        sync()
        times.append(time.perf_counter() - t0)
        if len(times) > 2000:
            break
    return statistics.median(times), len(times)


def check_ops(deadline=float("inf")):
    from gradjit.runtime.coverage import cuda_cpu_only
    from tests.cuda.nn_cases import NN_CASES
    from tests.runtime.test_ops_gradcheck import CASES, REPS
    cpu_only, rows = cuda_cpu_only(), []
    names, extra = {c.name for c in REPS}, []
    for c in CASES:   # every op: the first case of each op name the representatives miss
        if c.name not in names and "empty" not in c.tag:
            names.add(c.name)
            extra.append(c)

    def grads(fn, arrays, argnums, device):
        if device is None:   # the CPU reference: the NumPy interpreter (no compile per case)
            os.environ["GRADJIT_EXECUTOR"] = "numpy"
        try:
            return [np.asarray(g) for g in gj.grad(fn, argnums=argnums, device=device)(*arrays)]
        finally:
            os.environ.pop("GRADJIT_EXECUTOR", None)

    items = ([(c.id, c) for c in REPS] + [(f"nn:{k}", v) for k, v in sorted(NN_CASES.items())]
             + [(c.id, c) for c in extra])
    for dtype in (np.float64, np.float32):
        tol = 1e-10 if dtype == np.float64 else 1e-5
        for name, c in items:
            row = {"case": name, "dtype": np.dtype(dtype).name}
            if time.perf_counter() > deadline:   # the device budget is short: say what was left
                row.update(status="not_run")
                rows.append(row)
                continue
            try:
                if name.startswith("nn:"):
                    fn, arrays, argnums = c(dtype)
                else:
                    arrays = [a.astype(dtype) if a.dtype.kind == "f" else a for a in c.arrays()]
                    Wt = c.weights(arrays)
                    fn, argnums = (lambda *a, c=c, Wt=Wt: (c.fn(*a) * Wt).sum()), c.diff
                cpu = grads(fn, arrays, argnums, None)
            except Exception as exc:   # noqa: BLE001  (the CPU rejects this dtype here)
                row.update(status="skipped", why=str(exc)[:200])
                rows.append(row)
                continue
            try:
                gpu = grads(fn, arrays, argnums, "cuda")
                err = max(float(np.max(np.abs(g - w)) / max(1.0, float(np.max(np.abs(w)))))
                          if w.size else 0.0 for g, w in zip(gpu, cpu))
                status = "ok" if err <= tol else "FAILED"
                if status == "FAILED" and getattr(c, "name", "") in ("linalg_eigh", "linalg_svd"):
                    # eigen/singular vectors are unique up to sign; LAPACK and the Jacobi kernels
                    # choose differently, so a sign-dependent value has another gradient
                    v_cpu = np.asarray(gj.jit(fn)(*arrays))
                    v_gpu = np.asarray(gj.jit(fn, device="cuda")(*arrays))
                    if not np.allclose(v_cpu, v_gpu, rtol=1e-6):
                        status = "sign_dependent"
                row.update(status=status, rel_err=err)
            except NotImplementedError as exc:
                known = any(op in str(exc) for op in cpu_only)
                row.update(status="cpu_only" if known else "FAILED", why=str(exc)[:200])
            except Exception as exc:   # noqa: BLE001
                row.update(status="FAILED", why=f"{type(exc).__name__}: {exc}"[:400])
            rows.append(row)
            if row["status"] == "FAILED":
                print("FAILED", name, row.get("why", row.get("rel_err")), flush=True)
    return rows


def _gj_ns():
    return SimpleNamespace(sin=np.sin, exp=np.exp, log=np.log, tanh=np.tanh, sqrt=np.sqrt,
                           sigmoid=lambda u: u.sigmoid(), log_softmax=lambda z: z.log_softmax(1))


def time_workloads(budget, tiny=False, profile=False, others=True):
    from numba import cuda
    out = []
    for name in ("W1", "W2", "W3", "W5"):
        s = W.SPEC[name]
        args = W.make_inputs(name, tiny=tiny)
        f = (lambda *a, s=s: s["f"](_gj_ns(), *a))
        dev = [cuda.to_device(a) for a in args]
        g_cuda = gj.grad(f, argnums=s["wrt"], device="cuda")
        g_cpu = gj.grad(f, argnums=s["wrt"])
        ref = g_cpu(*args)
        got = g_cuda(*args)   # host in, host out: the check
        err = max(float(np.max(np.abs(a - b)) / max(1e-30, float(np.max(np.abs(b)))))
                  for a, b in zip(got, ref))
        rows = {"gradjit-cuda": _median_time(lambda: g_cuda(*dev), cuda.synchronize, budget),
                "gradjit-cpu": _median_time(lambda: g_cpu(*args), lambda: None, budget)}
        if profile:   # where a call's time goes (run with CUDA_LAUNCH_BLOCKING=1 to charge
            import cProfile   # each kernel's GPU time to the host line that launched it)
            import pstats
            prof = cProfile.Profile()
            prof.enable()
            for _ in range(10):
                g_cuda(*dev)
            cuda.synchronize()
            prof.disable()
            print(f"== profile of 10 {name} gradient calls (gradjit CUDA)")
            pstats.Stats(prof).sort_stats("cumulative").print_stats(16)
        if profile or not others:
            out.extend({"workload": name, "engine": e, "median_us": t * 1e6, "reps": n}
                       for e, (t, n) in rows.items())
            continue
        try:
            import torch
            if torch.cuda.is_available():
                m = SimpleNamespace(sin=torch.sin, exp=torch.exp, log=torch.log, tanh=torch.tanh,
                                    sqrt=torch.sqrt, sigmoid=torch.sigmoid,
                                    log_softmax=lambda z: torch.log_softmax(z, 1))
                ts = [torch.tensor(a, device="cuda") for a in args]
                wrt = [ts[i].requires_grad_() for i in s["wrt"]]

                def torch_call():
                    for t in wrt:
                        t.grad = None
                    s["f"](m, *ts).backward()
                rows["torch-cuda"] = _median_time(torch_call, torch.cuda.synchronize, budget)
        except Exception as exc:   # noqa: BLE001
            print("torch:", exc)
        try:
            import jax
            jax.config.update("jax_enable_x64", True)
            if any(d.platform == "gpu" for d in jax.devices()):
                import jax.numpy as jnp
                m = SimpleNamespace(sin=jnp.sin, exp=jnp.exp, log=jnp.log, tanh=jnp.tanh,
                                    sqrt=jnp.sqrt, sigmoid=jax.nn.sigmoid,
                                    log_softmax=lambda z: jax.nn.log_softmax(z, 1))
                jf = jax.jit(jax.grad(lambda *a: s["f"](m, *a), argnums=s["wrt"]))
                ja = [jax.device_put(a) for a in args]
                rows["jax-gpu"] = _median_time(lambda: jax.block_until_ready(jf(*ja)),
                                               lambda: None, budget)
        except Exception as exc:   # noqa: BLE001
            print("jax:", exc)
        base = rows["gradjit-cuda"][0]
        for eng, (t, n) in rows.items():
            row = {"workload": name, "engine": eng, "median_us": t * 1e6, "reps": n,
                   "ratio_gradjit_cuda_over_this": base / t, "max_rel_err_vs_cpu": err}
            if name == "W2":
                moved = 2 * args[0].nbytes   # read x once, write the gradient once
                row["bandwidth_GBps"] = moved / t / 1e9
            out.append(row)
    return out


def main(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--json", default=os.path.join(os.environ.get("OUT", "."), "gpu_check.json"))
    p.add_argument("--budget", type=float, default=2.0, help="seconds of timing per cell")
    p.add_argument("--skip-ops", action="store_true")
    p.add_argument("--tiny", action="store_true", help="tiny workloads (a simulator smoke run)")
    p.add_argument("--gradjit-only", action="store_true", help="time gradjit's engines only")
    p.add_argument("--profile", action="store_true",
                   help="gradjit only, with a cProfile of 10 CUDA calls per workload")
    p.add_argument("--ops-seconds", type=float, default=300.0,
                   help="time budget of the op checks; cases past it are reported not_run")
    a = p.parse_args(argv)
    from numba import cuda

    from gradjit.runtime.cuda import require
    require("bench/gpu_check.py")
    dev = cuda.get_current_device()
    name = getattr(dev, "name", "simulator")
    name = name.decode() if isinstance(name, bytes) else str(name)
    peak = next((v for k, v in PEAK_BW.items() if k in name), None)
    result = {"device": name, "peak_bandwidth_Bps": peak, "ops": []}
    os.makedirs(os.path.dirname(os.path.abspath(a.json)), exist_ok=True)

    def save():   # after each part: a run cut short by the device's time limit keeps what it did
        with open(a.json, "w") as f:
            json.dump(result, f, indent=1, default=str)
    # Speed first (the part only a GPU can answer), then correctness within its budget.
    result["timing"] = time_workloads(a.budget, a.tiny, a.profile, not a.gradjit_only)
    for r in result["timing"]:
        if "bandwidth_GBps" in r and peak:
            r["bandwidth_share_of_peak"] = r["bandwidth_GBps"] * 1e9 / peak
    save()
    t0 = time.perf_counter()
    result["ops"] = [] if a.skip_ops else check_ops(t0 + a.ops_seconds)
    result["ops_seconds"] = time.perf_counter() - t0
    counts = {}
    for r in result["ops"]:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    result["op_status_counts"] = counts
    save()
    print(f"device: {name}; op cases: {counts}")
    print("| workload | engine | median µs | reps | gradjit-cuda / this | GB/s |")
    print("|---|---|---|---|---|---|")
    for r in result["timing"]:
        print(f"| {r['workload']} | {r['engine']} | {r['median_us']:.1f} | {r['reps']} | "
              f"{r.get('ratio_gradjit_cuda_over_this', float('nan')):.2f} | "
              f"{r.get('bandwidth_GBps', float('nan')):.0f} |")
    return 1 if counts.get("FAILED") else 0


if __name__ == "__main__":
    sys.exit(main())
