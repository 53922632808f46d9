"""Held-out check: HIPS autograd 1.7.0's own test suite, run against gradjit.

Usage: python bench/heldout/run.py [--workdir DIR] [--compiled]

Contract
- Downloads the autograd 1.7.0 sdist with pip (``pip download autograd==1.7.0 --no-deps
  --no-binary :all:``) into the work dir, checks its SHA-256, and extracts its tests/. With
  --workdir an sdist already there is reused (and the work dir is kept); without it a
  temporary dir is used and removed at the end.
- Runs those tests with pytest in a subprocess, on one core (no xdist; BLAS, OpenMP and
  Numba held to one thread), against gradjit through the fake ``autograd`` in adapter/,
  with heldout_plugin.py loaded by ``-p`` and a pytest.ini of its own in the work dir (the
  repository's pytest settings do not apply, and nothing under bench/ is a conftest or a
  test module). gradjit is whatever ``import gradjit`` resolves to.
- Executor: GRADJIT_EXECUTOR=numpy (the interpreter) by default; --compiled runs Numba's
  compiled code instead (GRADJIT_EXECUTOR=numba, GRADJIT_TIERING=sync, so every call
  waits for its compile: far slower, 160 s for test_binary_ops alone on one core).
  GRADJIT_CACHE_DIR is private to the work dir.
- Selection, the same in every run so numbers compare: all test files but those in
  heldout_plugin.EXCLUDED_FILES (complex-valued, autograd internals, autograd.scipy, no
  tests), minus the tests named ``*complex*``; the checker skips complex-valued cases
  inside the remaining tests.
- Prints the pass rate over real-valued cases and the failures grouped by cause
  (refusals, wrong numbers, crashes, adapter-excluded: categorize.py), and writes it all,
  one record per test included, to bench/results/heldout.json.
- Exit status 0 whatever the tests' outcome (this is a measurement); 2 when the harness
  itself breaks: the download fails, the sdist's hash differs, pytest does not run.
"""
import argparse
import hashlib
import importlib.util
import json
import os
import platform
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import categorize  # noqa: E402
from heldout_plugin import EXCLUDED_FILES, COMPLEX_NAME  # noqa: E402

SDIST = "autograd-1.7.0.tar.gz"
# The hash of the sdist this bench was written against (PyPI's autograd 1.7.0): another
# file would be another suite, and numbers would not compare.
SDIST_SHA256 = "de743fd368d6df523cd37305dcd171861a9752a144493677d2c9f5a56983ff2f"
OUT_JSON = os.path.join(os.path.dirname(HERE), "results", "heldout.json")


class HarnessError(Exception):
    pass


def fetch_sdist(workdir):
    path = os.path.join(workdir, SDIST)
    if not os.path.exists(path):
        cmd = [sys.executable, "-m", "pip", "download", "autograd==1.7.0", "--no-deps",
               "--no-binary", ":all:", "-d", workdir]
        print("downloading:", " ".join(cmd), flush=True)
        p = subprocess.run(cmd, capture_output=True, text=True)
        if p.returncode != 0 or not os.path.exists(path):
            raise HarnessError("could not download the autograd 1.7.0 sdist with pip "
                               f"(exit {p.returncode}):\n{(p.stdout + p.stderr)[-3000:]}")
    with open(path, "rb") as fh:
        digest = hashlib.sha256(fh.read()).hexdigest()
    if digest != SDIST_SHA256:
        raise HarnessError(f"{path} has SHA-256 {digest}, expected {SDIST_SHA256}")
    return path


def extract_tests(sdist, workdir):
    """autograd-1.7.0/tests/* -> WORKDIR/tests/*, afresh (only the tests: the sdist's own
    autograd package must not be importable from the run)."""
    dest = os.path.join(workdir, "tests")
    shutil.rmtree(dest, ignore_errors=True)
    prefix = "autograd-1.7.0/tests/"
    with tarfile.open(sdist) as tf:
        members = [m for m in tf.getmembers() if m.name.startswith(prefix) and m.isfile()]
        for m in members:
            m.name = m.name[len("autograd-1.7.0/"):]
        kw = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
        tf.extractall(workdir, members=members, **kw)
    if not members:
        raise HarnessError(f"{sdist} has no {prefix}")
    return dest


def gradjit_source():
    spec = importlib.util.find_spec("gradjit")
    if spec is None:
        raise HarnessError("gradjit is not importable")
    root = os.path.dirname(os.path.dirname(spec.origin))
    info = {"path": os.path.dirname(spec.origin)}
    try:   # best effort: which commit the numbers belong to
        git = ["git", "-C", root]
        info["commit"] = subprocess.run(git + ["rev-parse", "HEAD"], capture_output=True,
                                        text=True, check=True).stdout.strip()
        info["dirty"] = bool(subprocess.run(git + ["status", "--porcelain", "-uno"],
                                            capture_output=True, text=True).stdout.strip())
    except (OSError, subprocess.CalledProcessError):
        pass
    return info


def run_suite(workdir, compiled):
    ini = os.path.join(workdir, "pytest.ini")
    with open(ini, "w") as fh:
        fh.write("[pytest]\n")
    results = os.path.join(workdir, "results.jsonl")
    env = dict(os.environ,
               PYTHONPATH=os.pathsep.join([HERE] + [p for p in [os.environ.get("PYTHONPATH")] if p]),
               GRADJIT_CACHE_DIR=os.path.join(workdir, "gradjit-cache"),
               HELDOUT_RESULTS=results,
               OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1",
               NUMBA_NUM_THREADS="1")
    if compiled:
        env.update(GRADJIT_EXECUTOR="numba", GRADJIT_TIERING="sync")
    else:
        env["GRADJIT_EXECUTOR"] = "numpy"
    cmd = [sys.executable, "-m", "pytest", "-c", ini, "--rootdir", workdir, "-q", "-rN",
           "-p", "no:cacheprovider", "-p", "no:xdist", "-p", "heldout_plugin", "tests"]
    log = os.path.join(workdir, "pytest.log")
    print(f"running autograd's tests (GRADJIT_EXECUTOR={env['GRADJIT_EXECUTOR']}); log: {log}",
          flush=True)
    with open(log, "w") as fh:
        rc = subprocess.run(cmd, cwd=workdir, env=env, stdout=fh, stderr=subprocess.STDOUT).returncode
    with open(log) as fh:
        tail = fh.read()[-3000:]
    # 0: all passed, 1: some failed. Anything else is pytest not running the suite.
    if rc not in (0, 1):
        raise HarnessError(f"pytest exited with {rc}:\n{tail}")
    with open(results) as fh:
        records = [json.loads(line) for line in fh]
    if not records:
        raise HarnessError(f"pytest ran no tests:\n{tail}")
    last = tail.strip().splitlines()[-1] if tail.strip() else ""
    return records, last, env["GRADJIT_EXECUTOR"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workdir", help="work dir (kept; an sdist in it is reused); default: a temporary one")
    ap.add_argument("--compiled", action="store_true", help="run Numba's compiled code, not the interpreter")
    args = ap.parse_args()
    workdir = os.path.abspath(args.workdir) if args.workdir else tempfile.mkdtemp(prefix="gradjit-heldout-")
    os.makedirs(workdir, exist_ok=True)
    t0 = time.time()
    try:
        gj = gradjit_source()
        sdist = fetch_sdist(workdir)
        extract_tests(sdist, workdir)
        records, pytest_line, executor = run_suite(workdir, args.compiled)
    except HarnessError as e:
        print(f"HARNESS ERROR (no measurement): {e}", file=sys.stderr)
        return 2
    finally:
        if not args.workdir:
            shutil.rmtree(workdir, ignore_errors=True)
    summary = categorize.summarize(records)
    print(f"pytest: {pytest_line}\n")
    print(categorize.render(summary))
    out = {
        "suite": "HIPS autograd 1.7.0 tests/ (sdist)", "sdist_sha256": SDIST_SHA256,
        "executor": executor, "tiering": "sync" if args.compiled else None,
        "gradjit": gj, "python": platform.python_version(),
        "numpy": __import__("numpy").__version__,
        "excluded_files": EXCLUDED_FILES,
        "deselected": f"tests whose name contains {COMPLEX_NAME!r}",
        "wall_s": round(time.time() - t0, 1), "pytest": pytest_line,
        **summary, "records": records,
    }
    os.makedirs(os.path.dirname(OUT_JSON), exist_ok=True)
    with open(OUT_JSON, "w") as fh:
        json.dump(out, fh, indent=1)
    print(f"\nwrote {OUT_JSON}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
