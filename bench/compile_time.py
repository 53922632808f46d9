"""Time to a first gradient and compile time: gradjit against jax.jit and torch eager.

Usage: python bench/compile_time.py [--programs rk4,mlp,bmm,attention] [--steps 10,100,1000]
           [--python-steps 10,100] [--layers 2,8,32] [--engines gradjit,jax,torch] [--json PATH]

Contract
- Programs (a scalar loss and its gradient; float64 unless said). Every engine runs the same
  source, written against a NumPy-like module ``xp`` (NumPy for gradjit, jax.numpy, a thin
  torch shim), on the same data (NumPy's default_rng(0)).
  - rk4: RK4 integration of a two-species (Lotka-Volterra) ODE for 64 trajectories, T steps,
    loss summed over the steps; gradient with respect to the 4 rate constants. As a loop
    (``gj.scan``, ``jax.lax.scan``) for each T of ``--steps``; as a Python ``for`` loop
    (gradjit folds it into a scan; JAX unrolls it) for each T of ``--python-steps``; torch
    eager (no scan) runs the Python loop for every T of either list.
  - mlp: N hidden tanh layers of width 64 (N of ``--layers``), input 64, a linear output of
    width 1, batch 32, mean squared error; gradient with respect to every weight and bias
    (a list of (W, b) pairs: a pytree for gradjit and JAX, leaf tensors for torch).
  - bmm: ``(a @ a).sum()``, a of shape (5, 4, 4); gradient with respect to a.
  - attention: one head, x of shape 512x64 float32, Wq, Wk, Wv 64x64 float32:
    ``softmax(q k^T / 8) v``, loss its sum of squares; gradient with respect to the weights.
- One fresh process per cell (gradjit: an empty compile cache in a temporary folder,
  GRADJIT_TIERING unset; the library's own Numba helpers cached beside its source stay
  warm), timed after the engine's import, data already built, thread settings the
  engines' defaults (torch's thread count and the 1-minute load average are recorded):
  - gradjit: ``first result s`` the first call of ``gj.grad(loss)`` with tiering (the
    default: the interpreter serves it while Numba compiles), ``compiled s`` from the start
    of that call until ``gj.wait_compiled`` returns (compiled code takes over).
  - jax: both the first call of ``jax.jit(jax.grad(loss))``, compile included (x64 on).
  - torch eager: both the first forward + ``torch.autograd.grad`` (nothing to compile).
  ``steady ms`` is the median of 20 calls after one more warm call. A cell with no gradient
  within 600 s, or that fails, is reported as an error row.
- Output: a markdown table on stdout, one row per cell; below it, per gradjit cell, the
  ratios the targets need: gradjit compiled s / jax compiled s (the jax cell of the same
  program: lax.scan for a loop, unrolled for a Python for) and gradjit first result s /
  torch first result s (the torch cell of the same program and size); then whether the
  engines' gradients agree (sum of |grad|, rtol 1e-4). JSON (default
  bench/results/compile_time.json), one row per cell. JAX and torch cells are skipped when
  the package is not importable (torch is an optional extra: the CPU wheel is enough).
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

CELL_LIMIT_S = 600
STEADY_CALLS = 20


# ---- programs (run inside a cell's process) ----------------------------------------------

def _setup(program, size):
    """(params, consts) as NumPy arrays: the same data for every engine."""
    rng = np.random.default_rng(0)
    if program == "rk4":
        return np.array([1.1, 0.4, 0.1, 0.4]), {"y0": rng.uniform(0.5, 1.5, size=(2, 64))}
    if program == "mlp":
        dims = [64] * (size + 1) + [1]
        params = [(rng.standard_normal((i, o)) / np.sqrt(i), 0.1 * rng.standard_normal(o))
                  for i, o in zip(dims[:-1], dims[1:])]
        return params, {"x": rng.standard_normal((32, 64)), "y": rng.standard_normal((32, 1))}
    if program == "bmm":
        return rng.standard_normal((5, 4, 4)), {}
    if program == "attention":
        x = rng.standard_normal((512, 64)).astype(np.float32)
        ws = tuple((rng.standard_normal((64, 64)) / 8).astype(np.float32) for _ in range(3))
        return ws, {"x": x}
    raise ValueError(program)


def _loss(program, size, variant, xp, scan, c):
    if program == "rk4":
        dt = 0.01

        def rhs(y, th):
            return xp.stack([th[0] * y[0] - th[1] * y[0] * y[1],
                             th[2] * y[0] * y[1] - th[3] * y[1]])

        def step(y, th):
            k1 = rhs(y, th); k2 = rhs(y + 0.5 * dt * k1, th)
            k3 = rhs(y + 0.5 * dt * k2, th); k4 = rhs(y + dt * k3, th)
            y = y + dt / 6.0 * (k1 + 2 * k2 + 2 * k3 + k4)
            return y, (y * y).sum()

        if variant == "loop":
            def loss(th):
                y, e = scan(lambda y, _: step(y, th), c["y0"], None, length=size)
                return e.sum()
        else:
            def loss(th):
                y, tot = c["y0"], 0.0
                for _ in range(size):
                    y, e = step(y, th)
                    tot = tot + e
                return tot
        return loss
    if program == "mlp":
        def loss(params):
            h = c["x"]
            for w, b in params[:-1]:
                h = xp.tanh(h @ w + b)
            w, b = params[-1]
            return xp.mean((h @ w + b - c["y"]) ** 2)
        return loss
    if program == "bmm":
        return lambda a: (a @ a).sum()

    def loss(ws):                                        # attention
        wq, wk, wv = ws
        q, k, v = c["x"] @ wq, c["x"] @ wk, c["x"] @ wv
        s = q @ k.T / 8.0
        p = xp.exp(s - xp.max(s, axis=-1, keepdims=True))
        p = p / xp.sum(p, axis=-1, keepdims=True)
        return ((p @ v) ** 2).sum()
    return loss


def _leaves(tree):
    if isinstance(tree, (list, tuple)):
        return [leaf for t in tree for leaf in _leaves(t)]
    return [tree]


def _tree_map(f, tree):
    if isinstance(tree, (list, tuple)):
        return type(tree)(_tree_map(f, t) for t in tree)
    return f(tree)


def _cell(engine, program, size, variant):
    params, consts = _setup(program, size)
    done, threads = True, None
    if engine == "gradjit":
        import gradjit as gj
        df = gj.grad(_loss(program, size, variant, np, gj.scan, consts))
        call = lambda: df(params)                        # noqa: E731
        t1 = time.perf_counter(); g = call(); first = time.perf_counter() - t1
        done = bool(gj.wait_compiled(3600)); compiled = time.perf_counter() - t1
    elif engine == "jax":
        import jax
        import jax.numpy as jnp
        jax.config.update("jax_enable_x64", True)
        c = {k: jnp.asarray(v) for k, v in consts.items()}
        p = _tree_map(jnp.asarray, params)
        df = jax.jit(jax.grad(_loss(program, size, variant, jnp, jax.lax.scan, c)))
        call = lambda: jax.block_until_ready(df(p))      # noqa: E731
        t1 = time.perf_counter(); g = call(); first = compiled = time.perf_counter() - t1
    else:
        import types
        import torch
        xp = types.SimpleNamespace(
            stack=torch.stack, tanh=torch.tanh, exp=torch.exp, mean=torch.mean,
            max=lambda a, axis, keepdims: torch.amax(a, dim=axis, keepdim=keepdims),
            sum=lambda a, axis, keepdims: torch.sum(a, dim=axis, keepdim=keepdims))
        c = {k: torch.from_numpy(v) for k, v in consts.items()}
        p = _tree_map(lambda a: torch.from_numpy(a).requires_grad_(), params)
        loss, leaves = _loss(program, size, variant, xp, None, c), _leaves(p)
        call = lambda: torch.autograd.grad(loss(p), leaves)  # noqa: E731
        t1 = time.perf_counter(); g = call(); first = compiled = time.perf_counter() - t1
        threads = torch.get_num_threads()
    call()
    ts = []
    for _ in range(STEADY_CALLS):
        t = time.perf_counter(); call(); ts.append(time.perf_counter() - t)
    leaves = [np.asarray(leaf) for leaf in _leaves(g)]
    return {"first": first, "compiled": compiled, "compiled_done": done, "threads": threads,
            "steady": float(np.median(ts)), "dtype": str(leaves[0].dtype),
            "check": float(sum(np.abs(leaf).sum() for leaf in leaves))}


# ---- the table (the parent process) --------------------------------------------------------

def _run(engine, program, size, variant):
    with tempfile.TemporaryDirectory(prefix="gj-compile-time-") as cache:
        os.chmod(cache, 0o700)
        env = dict(os.environ, GRADJIT_CACHE_DIR=cache)
        env.pop("GRADJIT_TIERING", None)
        spec = json.dumps([engine, program, size, variant])
        load = os.getloadavg()[0]
        try:
            out = subprocess.run([sys.executable, os.path.abspath(__file__), "--cell", spec],
                                 env=env, capture_output=True, text=True, timeout=CELL_LIMIT_S)
        except subprocess.TimeoutExpired:
            return {"error": f"no gradient within {CELL_LIMIT_S} s", "load_1m": load}
    if out.returncode != 0:
        lines = out.stderr.strip().splitlines() or [f"exit status {out.returncode}"]
        return {"error": lines[-1], "load_1m": load}
    return dict(json.loads(out.stdout.strip().splitlines()[-1]), load_1m=load)


ENGINES = {"gradjit": {"loop": "gradjit (gj.scan)", "pyfor": "gradjit (folded)",
                       "": "gradjit"},
           "jax": {"loop": "jax.jit (lax.scan)", "pyfor": "jax.jit (unrolled)", "": "jax.jit"},
           "torch": {"pyfor": "torch eager (Python for)", "": "torch eager"}}


def _cells(a, engines):
    """(program label, family, size, variant, engine) in table order."""
    ints = lambda s: [int(v) for v in s.split(",") if v.strip()]  # noqa: E731
    steps, pysteps, layers = ints(a.steps), ints(a.python_steps), ints(a.layers)
    cells = []
    for fam in [p.strip() for p in a.programs.split(",") if p.strip()]:
        if fam == "rk4":
            for t in sorted(set(steps) | set(pysteps)):
                for variant, label in (("loop", "loop"), ("pyfor", "Python for")):
                    for e in engines:
                        want = (t in steps and e != "torch") if variant == "loop" else \
                            (t in pysteps or e == "torch")
                        if want:
                            cells.append((f"RK4, T={t}, {label}", fam, t, variant, e))
        elif fam == "mlp":
            cells += [(f"MLP, N={n}", fam, n, "", e) for n in layers for e in engines]
        elif fam == "bmm":
            cells += [("batched matmul (5,4,4)", fam, 0, "", e) for e in engines]
        elif fam == "attention":
            cells += [("attention 512x64 f32", fam, 0, "", e) for e in engines]
        else:
            raise SystemExit(f"unknown program {fam!r} (rk4, mlp, bmm, attention)")
    return cells


def _ratios(rows):
    def find(engine, **kw):
        return next((r for r in rows if r["engine_id"] == engine and "error" not in r
                     and all(r[k] == v for k, v in kw.items())), None)
    print("\n| program | gradjit compiled s / jax compiled s (target <= 1.5) "
          "| gradjit first result s / torch first s (target <= 2) |")
    print("|---|---:|---:|")
    for r in rows:
        if r["engine_id"] != "gradjit" or "error" in r:
            continue
        j = find("jax", program=r["program"])
        t = find("torch", family=r["family"], size=r["size"])
        rj = f"{r['compiled'] / j['compiled']:.2f}" if j else "n/a"
        rt = f"{r['first'] / t['first']:.2f}" if t else "n/a"
        r["ratio_compiled_vs_jax"] = r["compiled"] / j["compiled"] if j else None
        r["ratio_first_vs_torch"] = r["first"] / t["first"] if t else None
        print(f"| {r['program']} | {rj} | {rt} |")


def _agreement(rows):
    bad = []
    for key in sorted({(r["family"], r["size"]) for r in rows}, key=str):
        group = [r for r in rows if (r["family"], r["size"]) == key and "error" not in r]
        ref = group[0]["check"] if group else None
        bad += [f"{r['program']} / {r['engine']}: {r['check']:.10g} vs {ref:.10g}"
                for r in group if abs(r["check"] - ref) > 1e-4 * abs(ref)]
    print("\ngradients: " + ("every engine agrees on each program (sum |grad|, rtol 1e-4)"
                             if not bad else "DISAGREE: " + "; ".join(bad)))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--programs", default="rk4,mlp,bmm,attention")
    p.add_argument("--steps", default="10,100,1000", help="RK4 T, as a loop")
    p.add_argument("--python-steps", default="10,100", help="RK4 T, as a Python for")
    p.add_argument("--layers", default="2,8,32", help="MLP hidden layers N")
    p.add_argument("--engines", default="gradjit,jax,torch")
    p.add_argument("--json", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                  "results", "compile_time.json"))
    p.add_argument("--cell", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.cell:
        print(json.dumps(_cell(*json.loads(a.cell))))
        return
    asked = [e.strip() for e in a.engines.split(",") if e.strip()]
    engines = [e for e in ENGINES if e in asked and (e == "gradjit" or importlib.util.find_spec(e))]
    skipped = sorted(set(asked) & {"jax", "torch"} - set(engines))
    if skipped:
        print(f"(not importable, skipped: {', '.join(skipped)})")
    rows = []
    print("| program | engine | first result s | compiled s | steady ms |")
    print("|---|---|---:|---:|---:|")
    for program, fam, size, variant, engine in _cells(a, engines):
        name = ENGINES[engine][variant]
        r = _run(engine, fam, size, variant)
        rows.append(dict(r, program=program, engine=name, engine_id=engine, family=fam,
                         size=size, variant=variant or None,
                         steps=size if fam == "rk4" else None))
        if "error" in r:
            print(f"| {program} | {name} | error: {r['error']} | | |", flush=True)
        else:
            late = "" if r.get("compiled_done", True) else " (still compiling)"
            print(f"| {program} | {name} | {r['first']:.3f} | {r['compiled']:.3f}{late} | "
                  f"{1e3 * r['steady']:.3f} |", flush=True)
    _ratios(rows)
    _agreement(rows)
    os.makedirs(os.path.dirname(a.json), exist_ok=True)
    with open(a.json, "w") as fh:
        json.dump(rows, fh, indent=1)


if __name__ == "__main__":
    main()
