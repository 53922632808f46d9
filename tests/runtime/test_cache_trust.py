"""The cache dir's trust boundary and its degraded modes (tracer/cache_store.py).

A dir gradjit cannot trust or use is never a reason a gradient fails: it compiles in memory
after one warning. Files it writes are private whatever the umask and never follow links.
Entries lock one by one: a process compiling one structure never waits for another's.
"""
import os
import stat
import subprocess
import sys

import numpy as np
import pytest

import gradjit as gj
from gradjit.tracer import cache_store
from tests.runtime.test_cache_faults import CHILD, run_child


@pytest.fixture
def fresh(monkeypatch, caplog):
    """Stores opened anew for the test (and after it), warnings captured."""
    cache_store.clear()
    caplog.set_level("WARNING", logger="gradjit.cache")
    yield caplog
    cache_store.clear()


def _mode(p):
    return stat.S_IMODE(os.stat(p).st_mode)


def test_created_private_whatever_the_umask(tmp_path, fresh):
    old = os.umask(0)
    try:
        store = cache_store.open_dir(str(tmp_path / "new" / "cache"))
        assert store.write(store.path("plans", "x.json"), b"data")
    finally:
        os.umask(old)
    assert _mode(store.root) == 0o700 and _mode(store.path("plans")) == 0o700
    assert _mode(store.path("plans", "x.json")) == 0o600 and _mode(store.path("key")) == 0o600
    assert store.read(store.path("plans", "x.json")) == b"data"


@pytest.mark.parametrize("case", ["group-writable", "world-writable", "a file", "uncreatable",
                                  "other owner", "key is a link"])
def test_an_untrusted_or_unusable_dir_is_not_used(tmp_path, fresh, case):
    d = tmp_path / "cache"
    if case in ("group-writable", "world-writable"):
        d.mkdir()
        d.chmod(0o770 if case == "group-writable" else 0o777)
    elif case == "a file":
        d.write_text("not a dir")
    elif case == "uncreatable":
        (tmp_path / "file").write_text("")
        d = tmp_path / "file" / "cache"
    elif case == "other owner":
        if os.geteuid() != 0:
            pytest.skip("only root can give a dir to another user")
        d.mkdir(mode=0o700)
        os.chown(d, 65534, 65534)
    else:
        d.mkdir(mode=0o700)
        (tmp_path / "planted-key").write_bytes(b"k" * 32)
        (d / "key").symlink_to(tmp_path / "planted-key")
    assert cache_store.open_dir(str(d)) is None
    assert str(d) in fresh.text and "compiling in memory" in fresh.text


def test_gradients_still_work_in_memory_and_write_nothing(tmp_path, fresh, monkeypatch):
    d = tmp_path / "shared"
    d.mkdir()
    d.chmod(0o777)
    monkeypatch.setenv("GRADJIT_CACHE_DIR", str(d))
    before = gj.stats()["compiles"]
    w = np.linspace(-1, 1, 9)
    g = gj.grad(lambda w: (np.cosh(w * 1.25) * np.arctan(w)).sum())(w)
    want = 1.25 * np.sinh(1.25 * w) * np.arctan(w) + np.cosh(1.25 * w) / (1 + w * w)
    np.testing.assert_allclose(g, want, rtol=1e-12)
    assert gj.stats()["compiles"] == before + 1
    assert list(d.iterdir()) == []
    assert sum("not using the compile cache" in r.getMessage() for r in fresh.records) == 1


def test_written_files_replace_links_and_reads_never_follow_them(tmp_path, fresh):
    store = cache_store.open_dir(str(tmp_path / "cache"))
    target = tmp_path / "victim"
    target.write_bytes(b"precious")
    path = store.path("plans", "p.json")
    store.folder(store.path("plans"))
    os.symlink(target, path)
    assert store.read(path) is None and not os.path.lexists(path)   # discarded, not followed
    os.symlink(target, path)
    assert store.write(path, b"new")
    assert target.read_bytes() == b"precious" and not os.path.islink(path)
    assert store.read(path) == b"new"


def test_a_lock_link_is_not_followed(tmp_path, fresh):
    store = cache_store.open_dir(str(tmp_path / "cache"))
    store.folder(store.path("locks"))
    target = tmp_path / "victim"
    target.write_bytes(b"precious")
    os.symlink(target, store.path("locks", "gj_x.lock"))
    with cache_store.entry_lock(store, "gj_x"):
        pass
    assert target.read_bytes() == b"precious"


@pytest.mark.slow   # (fresh processes: CI's slow suite runs it)
def test_entries_lock_one_by_one(tmp_path):
    """While this process holds the lock of program 0's entry, a fresh process compiles
    program 1 (it would wait forever on one lock for the whole cache)."""
    import fcntl
    first = run_child(tmp_path / "probe", 1)   # (program 0's entry name)
    (module,) = [f for f in first["files"][0] if f.startswith("gj_")]
    locks = tmp_path / "cache" / "locks"
    locks.mkdir(parents=True, mode=0o700)
    (tmp_path / "cache").chmod(0o700)
    with open(locks / (module[:-3] + ".lock"), "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        env = dict(os.environ, GRADJIT_CACHE_DIR=str(tmp_path / "cache"), PROGRAMS="1")
        env["PYTHONPATH"] = os.path.dirname(os.path.dirname(os.path.dirname(CHILD)))
        out = subprocess.run([sys.executable, "-c", _ONLY_PROGRAM_1], env=env,
                             capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split()[-1] == "1"   # compiled, while program 0's entry was locked


_ONLY_PROGRAM_1 = """
import numpy as np, gradjit as gj
from tests.runtime.cache_child import program
gj.grad(program(1))(np.linspace(-1.0, 1.0, 7), np.linspace(0.5, 1.5, 7))
print(gj.stats()["compiles"])
"""


@pytest.mark.slow   # (fresh processes: CI's slow suite runs it)
def test_the_same_structure_is_compiled_once_across_processes(tmp_path):
    env = dict(os.environ, GRADJIT_CACHE_DIR=str(tmp_path / "cache"))
    env.pop("GRADJIT_EXECUTOR", None)
    env["PYTHONPATH"] = os.path.dirname(os.path.dirname(os.path.dirname(CHILD)))
    procs = [subprocess.Popen([sys.executable, CHILD, "2"], env=env, stdout=subprocess.PIPE,
                              text=True) for _ in range(3)]
    outs = [p.communicate()[0] for p in procs]
    assert all(p.returncode == 0 for p in procs)
    import json
    stats = [json.loads(o.strip().splitlines()[-1]) for o in outs]
    assert sum(s["stats"]["compiles"] for s in stats) == 2   # each structure once in all
    assert all(s["g"] == stats[0]["g"] for s in stats)


def test_a_file_system_without_hard_links_still_works(tmp_path, fresh, monkeypatch):
    import errno

    def no_link(src, dst):
        raise OSError(errno.EPERM, "Operation not permitted")
    monkeypatch.setattr(os, "link", no_link)
    store = cache_store.open_dir(str(tmp_path / "cache"))
    assert store is not None and len((tmp_path / "cache" / "key").read_bytes()) == 32
    assert store.write(store.path("plans", "a.json"), b"x")
    assert store.read(store.path("plans", "a.json")) == b"x"
    store.put_module(store.path("gj_x.py"), "A = 1\n")
    assert (tmp_path / "cache" / "gj_x.py").read_text() == "A = 1\n"
