"""The disk cache survives faults (tracer/cache_store.py, runtime/numba_cache.py).

Every kind of file gradjit reads back from its cache (generated module, plan, link record,
Numba index, Numba data) is damaged in each of seven ways, each in its own program's entry;
the next fresh process must give every gradient exactly as before, name each damaged file
in a warning and run no planted payload; the process after it must find a healthy cache
(no warning, nothing compiled). Counters, exit codes and files, never clocks.
"""
import itertools
import json
import os
import pickle
import re
import subprocess
import sys

import numpy as np
import pytest

pytestmark = pytest.mark.slow   # (pyproject.toml: the default run skips it; CI runs it)

KINDS = {"module": r"^gj_[0-9a-f]{32}\.py$", "plan": r"^plans/[0-9a-f]+\.json$",
         "links": r"^numba/.*\.links$", "index": r"^numba/.*\.nbi$", "data": r"^numba/.*\.nbc$"}
MODES = ("empty", "half", "flip", "append", "garbage", "planted", "symlink")
CHILD = os.path.join(os.path.dirname(__file__), "cache_child.py")


def run_child(cache, n, **extra):
    """The report of a fresh ``cache_child.py n`` on ``cache`` (``extra``: more env)."""
    env = {k: v for k, v in os.environ.items()   # (helpers too in ``cache``: damaged there)
           if k not in ("GRADJIT_EXECUTOR", "GRADJIT_CACHE_READONLY", "GRADJIT_LIBRARY_CACHE_DIR")}
    env.update(GRADJIT_CACHE_DIR=str(cache), **extra)
    root = os.path.dirname(os.path.dirname(os.path.dirname(CHILD)))
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    out = subprocess.run([sys.executable, CHILD, str(n)], env=env, capture_output=True,
                         text=True)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


class _Run:
    """A pickle that runs ``code`` when it is loaded."""

    def __init__(self, code):
        self.code = code

    def __reduce__(self):
        return (exec, (self.code,))


def _payload(kind, marker, original):
    """What an attacker would plant: code that creates ``marker`` when run or unpickled, in
    the file's own format (with gradjit's header and a digest made without the key)."""
    code = f"open({str(marker)!r}, 'w').close()\n"
    if kind == "module":   # (the real source plus one line: it still compiles)
        return code.encode() + original
    fake = b"gjv1" + bytes(range(32))
    if kind == "plan":
        return fake + json.dumps({"source": code, "consts": [], "parallel": False,
                                  "packs": []}).encode()
    return fake + pickle.dumps(_Run(code))


def damage(path, kind, mode, marker, spare):
    raw = path.read_bytes()
    body = {"empty": b"", "half": raw[:len(raw) // 2], "append": raw + b"\x00trailing bytes",
            "flip": raw[:len(raw) // 2] + bytes([raw[len(raw) // 2] ^ 0xFF]) + raw[len(raw) // 2 + 1:],
            "garbage": np.random.default_rng(len(raw)).bytes(len(raw)),
            "planted": _payload(kind, marker, raw)}.get(mode)
    if mode == "symlink":   # (a link to a planted file elsewhere: never followed)
        spare.write_bytes(_payload(kind, marker, raw))
        path.unlink()
        path.symlink_to(spare)
    else:
        path.write_bytes(body)


def test_every_injected_fault_is_recovered_on_the_first_process_after_it(tmp_path):
    cache, marker = tmp_path / "cache", tmp_path / "payload-ran"
    combos = list(itertools.product(KINDS, MODES))
    first = run_child(cache, len(combos))
    assert first["stats"]["compiles"] == len(combos) and first["warnings"] == []
    damaged = []
    for i, (kind, mode) in enumerate(combos):
        (rel,) = [f for f in first["files"][i] if re.match(KINDS[kind], f)]
        damage(cache / rel, kind, mode, marker, tmp_path / f"elsewhere-{i}")
        damaged.append(str(cache / rel))
    second = run_child(cache, len(combos))
    assert not marker.exists()   # no planted payload ran
    assert second["g"] == first["g"]
    missing = [p for p in damaged if not any(p in m for m in second["warnings"])]
    assert missing == []   # each damaged file named in a warning
    assert len(second["warnings"]) == len(damaged)   # one each
    third = run_child(cache, len(combos))
    assert third["g"] == first["g"] and third["warnings"] == []
    assert third["stats"]["compiles"] == 0 and third["stats"]["disk_hits"] == len(combos)
    assert not marker.exists()


def test_a_read_only_warm_cache_is_used_without_writing(tmp_path):
    cache = tmp_path / "cache"
    first = run_child(cache, 3)
    before = {p: os.stat(p).st_mtime_ns for p in map(str, cache.rglob("*"))}
    ro = run_child(cache, 3, GRADJIT_CACHE_READONLY="1")
    assert ro["g"] == first["g"] and ro["warnings"] == []
    assert ro["stats"]["compiles"] == 0 and ro["stats"]["disk_hits"] == 3
    assert {p: os.stat(p).st_mtime_ns for p in map(str, cache.rglob("*"))} == before
    # a program the read-only cache does not hold is compiled in memory, and not written
    more = run_child(cache, 4, GRADJIT_CACHE_READONLY="1")
    assert more["g"][:3] == first["g"] and more["stats"]["compiles"] == 1
    assert {p: os.stat(p).st_mtime_ns for p in map(str, cache.rglob("*"))} == before
    if os.geteuid() != 0:   # (root writes through permission bits)
        for p in [cache, *cache.rglob("*")]:
            p.chmod(0o500 if p.is_dir() else 0o400)
        try:
            again = run_child(cache, 3)
        finally:
            for p in [cache, *cache.rglob("*")]:
                p.chmod(0o700 if p.is_dir() else 0o600)
        assert again["g"] == first["g"] and again["stats"]["disk_hits"] == 3
