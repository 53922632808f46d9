"""The library helpers generated code calls (BLAS blocks, allocation, special functions) are
cached in gradjit's verified store, not in the package's ``__pycache__``, and processes that
compile different signatures of one helper at once leave an index that names each one's own
machine code (runtime/numba_cache.py: ``adopt_library``). Counters and values, never clocks."""
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import gradjit as gj
from gradjit.lowering import alloc_cpu
from gradjit.runtime import numba_cache

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Each child compiles (or, with LOAD, loads from the disk cache) ``contiguous`` for its
# share of the signatures, after a start line every child waits for, and checks each one's
# result on a strided array of that dtype and rank.
CHILD = textwrap.dedent("""
    import json, os, sys, time
    import numpy as np, numba
    from gradjit.lowering import alloc_cpu
    from gradjit.runtime import compiler, numba_cache
    numba_cache.adopt_library()
    share = json.loads(sys.argv[1])
    while time.time() < float(sys.argv[2]):
        time.sleep(0.005)
    disp, out = alloc_cpu.contiguous, []
    for dt, nd in share:
        sig = (numba.types.Array(numba.from_dtype(np.dtype(dt)), nd, "A"),)
        if os.environ.get("LOAD"):
            out.append(bool(compiler._load_cached(disp, sig)))
        else:
            disp.compile(sig)
        a = np.arange(4 * 3 ** (nd - 1), dtype=dt).reshape((3,) * (nd - 1) + (4,))[..., ::2]
        r = disp(a)
        assert r.flags.c_contiguous and r.dtype == np.dtype(dt) and (r == a).all(), (dt, nd)
    print(json.dumps(out))
""")

SIGS = [(dt, nd) for dt in ("float64", "float32", "int64", "int32") for nd in (1, 2, 3)]


def _children(cache, shares, **env):
    # (helpers in ``cache``, unless ``env`` names a library dir: not the suite's shared one)
    base = {k: v for k, v in os.environ.items() if k != "GRADJIT_LIBRARY_CACHE_DIR"}
    env = dict(base, GRADJIT_CACHE_DIR=str(cache), PYTHONPATH=ROOT, **env)
    import time
    start = str(time.time() + 3.0)   # (every child imported and waiting by then)
    procs = [subprocess.Popen([sys.executable, "-c", CHILD, json.dumps(s), start], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for s in shares]
    outs = [p.communicate() for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err[-3000:]
    return [json.loads(out.strip().splitlines()[-1]) for out, _ in outs]


def test_helpers_are_cached_in_the_store_not_the_package(tmp_path, monkeypatch):
    monkeypatch.delenv("GRADJIT_LIBRARY_CACHE_DIR", raising=False)
    numba_cache.adopt_library()
    assert type(alloc_cpu.contiguous._cache).__name__.startswith("Gradjit")
    assert numba_cache.index_path(alloc_cpu.contiguous).startswith(
        os.path.join(gj.cache_dir(), "numba"))


@pytest.mark.slow   # (fresh processes: CI's slow suite runs it)
def test_processes_compiling_one_helper_at_once_keep_every_signature(tmp_path):
    # Four processes, three signatures each, all saved to one helper's index at once; a
    # fifth process then loads every signature from disk and gets each one's own code.
    _children(tmp_path, [SIGS[i::4] for i in range(4)])
    loaded = _children(tmp_path, [SIGS], LOAD="1")[0]
    assert loaded == [True] * len(SIGS)
    pycache = os.path.join(ROOT, "lowering", "__pycache__")
    assert not any(n.startswith("alloc_cpu.contiguous") for n in
                   (os.listdir(pycache) if os.path.isdir(pycache) else []))


@pytest.mark.slow   # (fresh processes: CI's slow suite runs it)
def test_a_damaged_helper_index_is_discarded_and_rebuilt(tmp_path):
    _children(tmp_path, [SIGS[:2]])
    index = next(os.path.join(tmp_path, "numba", n) for n in os.listdir(tmp_path / "numba")
                 if n.startswith("alloc_cpu.contiguous") and n.endswith(".nbi"))
    with open(index, "r+b") as f:
        f.seek(40)
        f.write(b"\xff\xfe\xfd")
    # (the child then compiles each signature when it calls it, which saves it again)
    assert _children(tmp_path, [SIGS[:2]], LOAD="1")[0] == [False, False]
    assert _children(tmp_path, [SIGS[:2]], LOAD="1")[0] == [True, True]
    assert np.array_equal(alloc_cpu.contiguous(np.arange(6.0)[::2]), [0.0, 2.0, 4.0])


@pytest.mark.slow   # (fresh processes: CI's slow suite runs it)
def test_a_library_dir_serves_the_helpers_of_several_cache_dirs(tmp_path):
    # GRADJIT_LIBRARY_CACHE_DIR: helpers compiled for one cache dir load in a process whose
    # cache dir is another (compiled once per machine, not once per dir), and live there only.
    lib = str(tmp_path / "library")
    _children(tmp_path / "a", [SIGS[:3]], GRADJIT_LIBRARY_CACHE_DIR=lib)
    assert _children(tmp_path / "b", [SIGS[:3]], LOAD="1", GRADJIT_LIBRARY_CACHE_DIR=lib)[0] \
        == [True] * 3
    assert any(n.startswith("alloc_cpu.contiguous") for n in os.listdir(tmp_path / "library" / "numba"))
    for d in ("a", "b"):
        numba_dir = tmp_path / d / "numba"
        assert not any(n.startswith("alloc_cpu.contiguous")
                       for n in (os.listdir(numba_dir) if numba_dir.is_dir() else []))
    # without it, each cache dir has its own
    assert _children(tmp_path / "c", [SIGS[:1]], LOAD="1")[0] == [False]
