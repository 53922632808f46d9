"""pytest plugin for the held-out run of autograd 1.7.0's tests against gradjit.

Loaded by run.py with ``-p heldout_plugin`` (so no conftest.py sits in the repository).
Contract:
- puts ``adapter/`` first on sys.path, so ``import autograd`` is the adapter, and refuses
  to run if it resolves anywhere else (a real autograd would measure nothing);
- skips whole files (EXCLUDED_FILES) and deselects tests named ``*complex*``: the bench
  measures real-valued cases, and the selection must stay as it is for numbers to compare
  across runs;
- stops any test after $HELDOUT_TIMEOUT seconds (default 180) with an exception, so a hang
  is a counted failure, not a stuck run;
- writes one JSON line per test to $HELDOUT_RESULTS: nodeid, outcome, the checker's
  counters, and for failures the exception type, message, last frames and whether the
  innermost frame is gradjit's code (categorize.py needs that to tell refusals and
  crashes inside gradjit from the rest).
"""
import json
import os
import signal
import sys
import traceback

import pytest

ADAPTER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "adapter")
sys.path.insert(0, ADAPTER)

# Whole files left out, and why (the reasons go into the JSON).
EXCLUDED_FILES = {
    "test_complex.py": "complex-valued",
    "test_fft.py": "complex-valued (FFT outputs are complex)",
    "test_scipy.py": "autograd.scipy (the adapter has none)",
    "test_core.py": "autograd internals (core make_vjp, unary_to_nary)",
    "test_vspaces.py": "autograd internals (VSpace)",
    "test_wrappers.py": "autograd.tracer primitive/isbox at import time",
    "test_direct.py": "holomorphic_grad, complex",
    "test_tests.py": "tests autograd's own checker with primitive/defvjp",
    "test_graphs.py": "graph-structure tests (autograd boxes), complex",
    "test_performance.py": "no tests",
    "_test_complexity.py": "not a test module (timing script)",
    "profiling.py": "not a test module",
}
# Tests whose name contains this are complex-valued by construction; their real
# counterparts are kept.
COMPLEX_NAME = "complex"

TIMEOUT = int(os.environ.get("HELDOUT_TIMEOUT", "180"))
RESULTS = os.environ.get("HELDOUT_RESULTS", "heldout-results.jsonl")
GRADJIT_DIRS = ()   # gradjit's source folders, set at session start


def _gradjit_dirs():
    import gradjit, gradjit.tracer, gradjit.lowering, gradjit.runtime
    return tuple(os.path.dirname(os.path.abspath(m.__file__)) + os.sep
                 for m in (gradjit, gradjit.tracer, gradjit.lowering, gradjit.runtime))


def pytest_sessionstart(session):
    import autograd
    if not os.path.abspath(autograd.__file__).startswith(ADAPTER + os.sep):
        raise pytest.UsageError(f"autograd resolves to {autograd.__file__}, not the adapter")
    global GRADJIT_DIRS
    GRADJIT_DIRS = _gradjit_dirs()
    open(RESULTS, "w").close()


def pytest_ignore_collect(collection_path, config):
    return True if collection_path.name in EXCLUDED_FILES else None


def pytest_collection_modifyitems(config, items):
    drop = [it for it in items if COMPLEX_NAME in it.name]
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = [it for it in items if COMPLEX_NAME not in it.name]


class HeldoutTimeout(Exception):
    pass


def _alarm(signum, frame):
    raise HeldoutTimeout(f"test exceeded {TIMEOUT}s")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    from autograd.test_util import STATS
    STATS["checks"] = STATS["complex_skipped"] = 0
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(TIMEOUT)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    rep = (yield).get_result()
    if not (rep.when == "call" or (rep.when == "setup" and not rep.passed)):
        return
    from autograd.test_util import STATS
    rec = {"nodeid": item.nodeid, "when": rep.when, "outcome": rep.outcome,
           "checks": STATS["checks"], "complex_skipped": STATS["complex_skipped"]}
    if call.excinfo is not None:
        t = call.excinfo.type
        frames = [f"{fr.filename}:{fr.lineno}:{fr.name}"
                  for fr in traceback.extract_tb(call.excinfo.tb)]
        rec.update(exc_type=f"{t.__module__}.{t.__qualname__}",
                   msg=str(call.excinfo.value)[:1500], frames=frames[-12:],
                   raised_in_gradjit=bool(frames) and frames[-1].startswith(
                       GRADJIT_DIRS))
    with open(RESULTS, "a") as fh:
        fh.write(json.dumps(rec) + "\n")
