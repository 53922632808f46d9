"""What each performance rule of the code generator earns, and on which programs.

Usage: python bench/rules.py [--rules NAME,...] [--repeats 2] [--json PATH]

Contract
- ``RULES``: every size threshold or special case the CPU code generator and its BLAS
  helpers decide by (``PARALLEL_MIN``, ``SMALL_ROW``, ...), with the value that turns it
  off. ``PROGRAMS``: the eight bench workloads (``--quick`` sizes) and programs of kinds
  users write that the rules are about (a batch-1 GRU, logistic and linear regression, a
  softmax classifier head, normalised densities, a small MLP).
- For each rule, the programs whose generated source changes when the rule is off are
  the ones it affects (source hashes, one process per rule); each affected program's
  steady ``value_and_grad`` (median of calls after the compile) and its compile (helpers' code
  warm in a shared library dir) are timed with the rule on and off, in fresh processes,
  alternating ``--repeats`` times; the best median of each side is kept. ``PAR_MIN``
  changes no source (it lives in ``blas_cpu.mm_into``): it affects programs with a
  matrix product, and each side compiles the helpers into a library dir of its own.
- Output: a markdown table (rule, program, on/off steady, off/on, on/off compile), and
  per rule the programs it makes faster (off/on >= 1.1, steady) and slower (<= 0.9); the
  compile columns say what it costs the first compile (tiering hides that from the first
  result). Default environment: no thread variables are set.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RULES = {   # name -> (value that turns the rule off, what the rule does)
    "PARALLEL_MIN": ("1 << 62", "loops of 2**18 elements run in parallel (prange)"),
    "VEC_SUM_MIN": ("1 << 62", "a sum of 64+ elements in a loop of vector math is stored in blocks"),
    "ROW_BUFFER_MIN": ("1 << 62", "row reductions of rows 256+ wide go through a row buffer"),
    "ROW_PASS_MIN": ("1 << 62", "gemv and transposed gemv of a 2**18+ matrix in one row pass"),
    "RANK_ONE": ("False", "outer products (+ accumulator) call cached helpers, not loops"),
    "SMALL_TRANSPOSE": ("0", "2-D transposes up to 4096 elements are copied to C order"),
    "SMALL_ROW": ("0", "a row times a small matrix is a loop nest (smm), not BLAS"),
    "PAR_MIN": ("1 << 62", "products of 2**18+ multiply-adds split over the threads"),
}
EXTRA = ("gru", "logreg", "linreg", "softmax_head", "bigsum", "smallsum", "plainsum",
         "mlp_small")

# The child: patch the rule, build every program's gradient, print hashes or timings.
_CHILD = r'''
import hashlib, json, os, sys, time
sys.path.insert(0, ROOT)
import numpy as np, gradjit as gj
import gradjit.lowering.codegen_cpu, gradjit.lowering.schedule_rows, gradjit.lowering.blas_cpu
from bench import rules
rule, value, mode, names = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4].split(",")
if rule != "none":
    hits = [m for m in list(sys.modules.values())
            if getattr(m, "__name__", "").startswith("gradjit.") and rule in vars(m)]
    assert hits, rule
    for m in hits:
        setattr(m, rule, eval(value))
out = {}
for name in names:
    fn, args, wrt = rules.program(name)
    g = gj.value_and_grad(fn, argnums=wrt)   # (the loss too, as a training loop logs it)
    if mode == "hash":
        src = "\n".join(l for l in g.graphs(*args)[2].splitlines()
                        if not l.startswith("# gradjit.lowering."))
        out[name] = [hashlib.sha1(src.encode()).hexdigest()[:10], "bl.mm(" in src]
        continue
    t = time.perf_counter(); g(*args); compile_s = time.perf_counter() - t
    n, ts, t_end = 0, [], time.perf_counter() + 0.6
    while time.perf_counter() < t_end or n < 5:
        t = time.perf_counter(); g(*args); ts.append(time.perf_counter() - t); n += 1
    out[name] = [float(np.median(ts)), compile_s]
print(json.dumps(out))
'''.replace("ROOT", repr(ROOT))


def program(name):
    """(f, args, argnums) of a program: a bench workload (W1-W8, --quick) or an extra."""
    import numpy as np
    if name.startswith("W"):
        sys.path.insert(0, ROOT)
        from bench import workloads as W
        spec = W.SPEC[name]
        return (lambda *a, f=spec["f"]: f(W.NP, *a)), W.make_inputs(name, quick=True), spec["wrt"]
    rng = np.random.default_rng(1)
    sig = lambda u: 1 / (1 + np.exp(-u))   # noqa: E731
    if name == "gru":   # batch-1 GRU-like cell, input 16, hidden 32, 60 steps
        xs = rng.standard_normal((60, 1, 16))
        ws = [rng.standard_normal(s) * 0.2 for s in ((16, 32), (32, 32), (16, 32), (32, 32))]

        def gru(Wz, Uz, Wc, Uc, xs):
            h = np.zeros((1, 32))
            for t in range(xs.shape[0]):
                z = sig(xs[t] @ Wz + h @ Uz)
                h = (1 - z) * h + z * np.tanh(xs[t] @ Wc + (h * z) @ Uc)
            return (h * h).sum()
        return gru, ws + [xs], (0, 1, 2, 3)
    if name == "logreg":   # logistic regression, 20000 x 50
        X, y = rng.standard_normal((20000, 50)), np.sign(rng.standard_normal((20000, 1)))
        return (lambda w, X, y: np.log1p(np.exp(-y * (X @ w))).mean() + 1e-3 * (w * w).sum(),
                [rng.standard_normal((50, 1)) * 0.1, X, y], (0,))
    if name == "softmax_head":   # a classifier head: 1024 x 128 features, 512 classes
        X = rng.standard_normal((1024, 128)).astype(np.float32)
        Y = np.eye(512, dtype=np.float32)[rng.integers(0, 512, 1024)]

        def head(W, X, Y):
            z = X @ W
            s = z - z.max(1, keepdims=True)
            return -(Y * (s - np.log(np.exp(s).sum(1, keepdims=True)))).sum() / X.shape[0]
        return head, [(rng.standard_normal((128, 512)) * 0.1).astype(np.float32), X, Y], (0,)
    if name in ("bigsum", "smallsum"):   # a normalised density over 100 000 / 2048 points:
        # its gradient needs the full sum of vector math (below the parallel size)
        def density(x, t):
            e = np.exp(-np.tanh(x * t) ** 2)
            return ((e / e.sum()) * t).sum()
        n = 100000 if name == "bigsum" else 2048
        return density, [rng.standard_normal(n), rng.standard_normal(n)], (0,)
    if name == "plainsum":   # the same of plain arithmetic over 100 000 points
        def plain(x, t):
            e = x * x + 1.0
            return ((e / e.sum()) * t).sum()
        return plain, [rng.standard_normal(100000), rng.standard_normal(100000)], (0,)
    if name == "linreg":   # least squares, 4000 x 50 (below the row pass size)
        X, y = rng.standard_normal((4000, 50)), rng.standard_normal((4000, 1))
        return (lambda w, X, y: ((X @ w - y) ** 2).mean(), [rng.standard_normal((50, 1)), X, y],
                (0,))
    if name == "mlp_small":  # MLP 64-64-64-1, batch 32
        X, Y = rng.standard_normal((32, 64)), rng.standard_normal((32, 1))
        ws = [rng.standard_normal(s) / 8 for s in ((64, 64), (64, 64), (64, 1))]

        def mlp(W1, W2, W3, X, Y):
            h = np.tanh(np.tanh(X @ W1) @ W2)
            return ((h @ W3 - Y) ** 2).mean()
        return mlp, ws + [X, Y], (0, 1, 2)
    raise ValueError(name)


def _child(rule, value, mode, names, lib):
    env = {k: v for k, v in os.environ.items() if k != "GRADJIT_EXECUTOR"}
    env.update(GRADJIT_CACHE_DIR=tempfile.mkdtemp(prefix="gj-rules-"), GRADJIT_TIERING="sync",
               GRADJIT_LIBRARY_CACHE_DIR=lib)
    out = subprocess.run([sys.executable, "-c", _CHILD, rule, value, mode, ",".join(names)],
                         env=env, capture_output=True, text=True, cwd=ROOT)
    shutil.rmtree(env["GRADJIT_CACHE_DIR"], ignore_errors=True)
    if out.returncode:
        raise SystemExit(f"{rule} {mode}: {out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rules", default=",".join(RULES))
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--json", default=os.path.join(ROOT, "bench", "results", "rules.json"))
    a = p.parse_args(argv)
    names = [f"W{i}" for i in range(1, 9)] + list(EXTRA)
    lib = tempfile.mkdtemp(prefix="gj-rules-lib-")
    base = _child("none", "0", "hash", names, lib)
    _child("none", "0", "time", names, lib)   # (the helpers' code compiled once, up front)
    rows = []
    for rule in a.rules.split(","):
        off, what = RULES[rule]
        if rule == "PAR_MIN":
            hit = [n for n in names if base[n][1]]
            libs = {"on": tempfile.mkdtemp(prefix="gj-rules-lib-"),
                    "off": tempfile.mkdtemp(prefix="gj-rules-lib-")}
        else:
            changed = _child(rule, off, "hash", names, lib)
            hit = [n for n in names if changed[n][0] != base[n][0]]
            libs = {"on": lib, "off": lib}
        best = {}
        for _ in range(a.repeats if hit else 0):
            for side, value in (("on", "none"), ("off", off)):
                r = _child(rule if side == "off" else "none", value, "time", hit, libs[side])
                for n, (steady, comp) in r.items():
                    b = best.setdefault((n, side), [steady, comp])
                    best[n, side] = [min(b[0], steady), min(b[1], comp)]
        for n in hit:
            (s_on, c_on), (s_off, c_off) = best[n, "on"], best[n, "off"]
            rows.append(dict(rule=rule, what=what, program=n, steady_on_us=s_on * 1e6,
                             steady_off_us=s_off * 1e6, compile_on_s=c_on, compile_off_s=c_off))
        if not hit:
            rows.append(dict(rule=rule, what=what, program=None))
        print(f"# {rule}: {', '.join(hit) or 'no program'}", file=sys.stderr)
    print("| rule | program | steady µs on | off | off / on | compile s on | off |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for r in rows:
        if r["program"] is None:
            print(f"| {r['rule']} | (changes no program's code) | | | | | |")
            continue
        print(f"| {r['rule']} | {r['program']} | {r['steady_on_us']:.1f} | "
              f"{r['steady_off_us']:.1f} | {r['steady_off_us'] / r['steady_on_us']:.2f} | "
              f"{r['compile_on_s']:.2f} | {r['compile_off_s']:.2f} |")
    print("\n| rule | faster with it (off / on >= 1.1) | slower with it (off / on <= 0.9) |"
          "\n|---|---|---|")
    for rule in a.rules.split(","):
        mine = [r for r in rows if r["rule"] == rule and r["program"]]
        won = [r["program"] for r in mine if r["steady_off_us"] >= 1.1 * r["steady_on_us"]]
        lost = [r["program"] for r in mine if r["steady_off_us"] <= 0.9 * r["steady_on_us"]]
        print(f"| {rule} | {', '.join(won) or 'none'} | {', '.join(lost) or 'none'} |")
    if a.json:
        with open(a.json, "w") as fh:
            json.dump({"rows": rows, "env": {k: v for k, v in os.environ.items()
                                             if k.startswith(("OMP_", "OPENBLAS_", "MKL_", "NUMBA_"))}},
                      fh, indent=1)


if __name__ == "__main__":
    main()
