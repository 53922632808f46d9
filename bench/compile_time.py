"""Time to a first gradient, by program length: loops written with gj.scan against JAX.

Usage: python bench/compile_time.py [--steps 10,100,1000] [--json PATH]

Contract
- Program: RK4 integration of a two-species (Lotka-Volterra) ODE for 64 trajectories,
  T steps, loss summed over the steps; gradient with respect to the 4 rate constants.
  Written as a loop (``gj.scan``, ``jax.lax.scan``) for every T, and as a Python ``for``
  loop (gradjit folds it into a scan; JAX unrolls it) for the T of ``--python-steps``.
- One fresh process per cell, with an empty gradjit cache: ``first result s`` is the
  first gradient with tiering (the default: the interpreter serves it while Numba
  compiles), ``compiled s`` the wait until the compiled code takes over (gradjit) or the
  first call of ``jax.jit`` (compile included), ``steady ms`` the median of later calls.
- Output: a markdown table on stdout, and JSON (default
  bench/results/compile_time.json). JAX is skipped when not importable.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

_PROGRAM = """
import time, json, sys
import numpy as np
T = int(sys.argv[1])
rng = np.random.default_rng(0)
y0 = rng.uniform(0.5, 1.5, size=(2, 64))
theta = np.array([1.1, 0.4, 0.1, 0.4])
dt = 0.01
def rhs(y, th):
    return np.stack([th[0] * y[0] - th[1] * y[0] * y[1], th[2] * y[0] * y[1] - th[3] * y[1]])
def step(y, th):
    k1 = rhs(y, th); k2 = rhs(y + 0.5 * dt * k1, th)
    k3 = rhs(y + 0.5 * dt * k2, th); k4 = rhs(y + dt * k3, th)
    y = y + dt / 6.0 * (k1 + 2 * k2 + 2 * k3 + k4)
    return y, (y * y).sum()
"""

_GRADJIT = _PROGRAM + """
t0 = time.perf_counter()
import gradjit as gj
def loss(th):
    y, e = gj.scan(lambda y, _: step(y, th), y0, None, length=T)
    return e.sum()
df = gj.grad(loss)
t1 = time.perf_counter(); g = df(theta); first = time.perf_counter() - t1
gj.wait_compiled(3600); compiled = time.perf_counter() - t1
df(theta)
ts = []
for _ in range(20):
    t = time.perf_counter(); df(theta); ts.append(time.perf_counter() - t)
print(json.dumps({"first": first, "compiled": compiled, "steady": float(np.median(ts)),
                  "check": float(np.abs(g).sum())}))
"""

_GRADJIT_PY = _GRADJIT.replace("""def loss(th):
    y, e = gj.scan(lambda y, _: step(y, th), y0, None, length=T)
    return e.sum()""", """def loss(th):
    y, tot = y0, 0.0
    for _ in range(T):
        y, e = step(y, th)
        tot = tot + e
    return tot""")

_JAX = _PROGRAM + """
PYLOOP = len(sys.argv) > 2
import jax, jax.numpy as jnp
jax.config.update("jax_enable_x64", True)
def rhs(y, th):
    return jnp.stack([th[0] * y[0] - th[1] * y[0] * y[1], th[2] * y[0] * y[1] - th[3] * y[1]])
def jstep(y, th):
    k1 = rhs(y, th); k2 = rhs(y + 0.5 * dt * k1, th)
    k3 = rhs(y + 0.5 * dt * k2, th); k4 = rhs(y + dt * k3, th)
    y = y + dt / 6.0 * (k1 + 2 * k2 + 2 * k3 + k4)
    return y, (y * y).sum()
def loss(th):
    y, e = jax.lax.scan(lambda y, _: jstep(y, th), jnp.asarray(y0), None, length=T)
    return e.sum()
if PYLOOP:
    def loss(th):
        y, tot = jnp.asarray(y0), 0.0
        for _ in range(T):
            y, e = jstep(y, th)
            tot = tot + e
        return tot
df = jax.jit(jax.grad(loss))
t1 = time.perf_counter(); g = df(theta).block_until_ready(); first = time.perf_counter() - t1
ts = []
for _ in range(20):
    t = time.perf_counter(); df(theta).block_until_ready(); ts.append(time.perf_counter() - t)
print(json.dumps({"first": first, "compiled": first, "steady": float(np.median(ts)),
                  "check": float(np.abs(np.asarray(g)).sum())}))
"""


CELL_LIMIT_S = 600


def _run(code, steps, extra=()):
    with tempfile.TemporaryDirectory(prefix="gj-compile-time-") as cache:
        os.chmod(cache, 0o700)
        env = dict(os.environ, GRADJIT_CACHE_DIR=cache)
        env.pop("GRADJIT_TIERING", None)
        try:
            out = subprocess.run([sys.executable, "-c", code, str(steps), *extra], env=env,
                                 capture_output=True, text=True, timeout=CELL_LIMIT_S)
        except subprocess.TimeoutExpired:
            return {"error": f"no gradient within {CELL_LIMIT_S} s"}
    if out.returncode != 0:
        return {"error": out.stderr.strip().splitlines()[-1]}
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", default="10,100,1000")
    p.add_argument("--python-steps", default="10,100")
    p.add_argument("--json", default=os.path.join(os.path.dirname(__file__), "results",
                                                  "compile_time.json"))
    a = p.parse_args()
    try:
        import jax  # noqa: F401
        have_jax = True
    except ImportError:
        have_jax = False
    cells = [(f"RK4, T={t}, loop", "gradjit (gj.scan)", _GRADJIT, t, ())
             for t in map(int, a.steps.split(","))]
    cells += [(f"RK4, T={t}, loop", "jax (lax.scan)", _JAX, t, ())
              for t in map(int, a.steps.split(",")) if have_jax]
    cells += [(f"RK4, T={t}, Python for", "gradjit (folded)", _GRADJIT_PY, t, ())
              for t in map(int, a.python_steps.split(",")) if a.python_steps]
    cells += [(f"RK4, T={t}, Python for", "jax (unrolled)", _JAX, t, ("pyloop",))
              for t in map(int, a.python_steps.split(",")) if a.python_steps and have_jax]
    rows = []
    print("| program | engine | first result s | compiled s | steady ms |")
    print("|---|---|---:|---:|---:|")
    for program, name, code, steps, extra in sorted(cells, key=lambda c: (c[0][-4:], c[3])):
        r = _run(code, steps, extra)
        rows.append(dict(r, program=program, engine=name, steps=steps))
        if "error" in r:
            print(f"| {program} | {name} | error: {r['error']} | | |")
        else:
            print(f"| {program} | {name} | {r['first']:.3f} | {r['compiled']:.3f} | "
                  f"{1e3 * r['steady']:.3f} |", flush=True)
    os.makedirs(os.path.dirname(a.json), exist_ok=True)
    with open(a.json, "w") as fh:
        json.dump(rows, fh, indent=1)


if __name__ == "__main__":
    main()
