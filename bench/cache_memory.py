"""Memory held per compiled structure, with and without the in-memory bound.

Usage: python bench/cache_memory.py [--structures N] [--json PATH]

Contract
- One fresh process per row: one function's gradient at 20 shapes (a warm-up), then at N
  more (each shape is a distinct structure), the cyclic collector run and evicted code
  unloaded before each reading. Reported: resident memory (RSS) growth per structure
  over the N, for a bound of 10 compiled entries per table (``gj.cache_size``) and for
  an unbounded process, with an empty disk cache (every structure compiled) and with a
  warm one (every structure loaded from disk).
- Output: a markdown table on stdout, the numbers as JSON (default
  bench/results/cache_memory.json). Linux only (reads /proc/self/statm).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

_CHILD = """
import gc, json, sys
import numpy as np, gradjit as gj
from gradjit.runtime import memory
bound, n, warm = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
gj.cache_size(bound)
def f(w, x):
    y = w * x
    for _ in range(3):
        y = np.sin(y) + 0.25 * y
    for _ in range(3):
        y = np.tanh(y) * x
    return (y * y).sum()
df = gj.grad(f)
def rss():
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * 4096 / 2 ** 20
def run(lo, hi):
    for k in range(lo, hi):
        df(np.linspace(-1.0, 1.0, k), np.linspace(0.5, 1.5, k))
    gc.collect()
    memory.unload_pending()
run(5, 5 + warm)
r0 = rss()
run(5 + warm, 5 + warm + n)
s = gj.stats()
print(json.dumps({"per_mib": (rss() - r0) / n, "rss_mib": rss(), "compiles": s["compiles"],
                  "disk_hits": s["disk_hits"], "evictions": s["evictions"]}))
"""


def measure(bound, n, cache, warm=20):
    """The child's report: RSS growth per structure over ``n`` structures after ``warm``."""
    env = {k: v for k, v in os.environ.items() if k != "GRADJIT_EXECUTOR"}
    env["GRADJIT_CACHE_DIR"] = cache
    env["GRADJIT_TIERING"] = "sync"   # memory of compiled structures, each compiled on its call
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = subprocess.run([sys.executable, "-c", _CHILD, str(bound), str(n), str(warm)], env=env,
                         capture_output=True, text=True, check=True, cwd=root)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--structures", type=int, default=80)
    p.add_argument("--json", default=os.path.join(os.path.dirname(__file__), "results",
                                                  "cache_memory.json"))
    a = p.parse_args(argv)
    rows = []
    for bound in (10, 100000):
        with tempfile.TemporaryDirectory(prefix="gradjit-bench-memory-") as cache:
            for disk in ("empty", "warm"):
                r = measure(bound, a.structures, cache)
                rows.append(dict(r, bound=bound, disk=disk))
    print("| bound (entries per table) | disk cache | structures | RSS growth per structure "
          "| compiles | disk hits | evictions |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        b = r["bound"] if r["bound"] < 100000 else "none"
        print(f"| {b} | {r['disk']} | {a.structures} | {r['per_mib']:.2f} MiB | {r['compiles']} "
              f"| {r['disk_hits']} | {r['evictions']} |")
    if a.json:
        os.makedirs(os.path.dirname(a.json), exist_ok=True)
        with open(a.json, "w") as fh:
            json.dump({"structures": a.structures, "rows": rows}, fh, indent=1)


if __name__ == "__main__":
    main()
