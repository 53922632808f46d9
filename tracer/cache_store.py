"""The compile cache on disk: where it lives, whether it is trusted, and files that verify.

Contract
- ``open_dir(path, ro=False)``: the ``Store`` of ``path`` after the checks below, or None.
- ``current()``: the ``Store`` of ``$GRADJIT_CACHE_DIR`` (else ``$XDG_CACHE_HOME/gradjit``,
  else ``~/.cache/gradjit``), or None where that dir cannot be used; then gradjit compiles in
  memory, after one warning on the ``gradjit.cache`` logger saying why. It never raises.
- ``library()``: the store of the library helpers' machine code (BLAS blocks, LAPACK
  wrappers, allocation; runtime/numba_cache.py): ``$GRADJIT_LIBRARY_CACHE_DIR`` when set
  (one folder of helpers for several cache dirs: compiled once per machine, not once per
  dir), else ``current()``. Same checks and fallbacks as ``current()``.
- Trust (the checks ssh and pip make): the dir is created 0700 whatever the umask; a dir
  that is not a directory, belongs to another user, or is writable by group or others is
  not used. Its key (``key``: 32 random bytes, 0600, made once) must be the user's, private.
- ``Store.writable``: False for a dir this process cannot write, or with
  ``GRADJIT_CACHE_READONLY=1`` (a warm cache shipped in an image): entries are read and
  verified, nothing is written, no lock is taken.
- ``read(path)`` / ``write(path, data)``: every file gradjit writes, except generated modules,
  is ``MAGIC + HMAC-SHA256(key, name + payload) + payload``. ``read`` returns the payload
  only when it verifies; a file that does not (damaged, edited, planted, a symlink, another
  user's) is discarded (deleted when writable) with one warning naming it, and reads as
  missing, so the caller rebuilds it. Nothing is unpickled or executed before it verifies.
  Files are written through a private temporary file and a rename (a symlink at the path
  is replaced, never followed); ``write`` returns False when nothing was written.
- ``put_module(path, source)``: generated modules are named by their content hash and
  executed from the source in memory (``gensrc.import_source``), never from the file, which
  is there for readers and tracebacks: one that differs from its source is rewritten.
- ``entry_lock(store, name)``: serialises the compile of one entry (a generated module and
  Numba's files for it) across threads and processes; entries never wait on each other.
- ``clear(disk)``: forget the stores (and with ``disk`` delete the dir's entries).
"""
from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import hmac
import logging
import os
import shutil
import stat
import tempfile
import threading
import weakref

LOG = logging.getLogger("gradjit.cache")
MAGIC = b"gjv1"
_HEAD = len(MAGIC) + 32
_STORES = {}    # (dir, read-only flag) -> Store or None
_WARNED = set()
_GUARD = threading.Lock()
_THREAD_LOCKS = weakref.WeakValueDictionary()   # entry name -> its threading.RLock while held
# (flock does not serialise one process's threads)


def configured_dir():
    d = os.environ.get("GRADJIT_CACHE_DIR")
    if not d:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        d = os.path.join(base, "gradjit")
    return os.path.abspath(os.path.expanduser(d))


def warn_once(key, msg, *args):
    if key not in _WARNED:
        _WARNED.add(key)
        LOG.warning(msg, *args)


def current():
    return _store(configured_dir())


def library():
    d = os.environ.get("GRADJIT_LIBRARY_CACHE_DIR")
    return _store(os.path.abspath(os.path.expanduser(d))) if d else current()


def _store(d):
    """The Store of dir ``d`` (opened once per dir and read-only flag), or None."""
    ro = os.environ.get("GRADJIT_CACHE_READONLY", "") not in ("", "0")
    s = _STORES.get((d, ro), _STORES)
    if s is _STORES:
        with _GUARD:
            s = _STORES.get((d, ro), _STORES)
            if s is _STORES:
                s = _STORES[(d, ro)] = open_dir(d, ro)
    return s


def _refuse(d, why):
    warn_once(("dir", d), "gradjit: not using the compile cache at %s: %s; compiling in memory "
              "(set GRADJIT_CACHE_DIR to a private directory to keep compiled code)", d, why)
    return None


def open_dir(d, ro=False):
    if not ro and not os.path.lexists(d):
        try:
            os.makedirs(os.path.dirname(d), exist_ok=True)
            os.mkdir(d, 0o700)
            os.chmod(d, 0o700)   # (mkdir's mode is masked by the umask)
        except FileExistsError:
            pass
        except OSError as e:
            return _refuse(d, f"it cannot be created ({e.strerror})")
    try:
        st = os.stat(d)
    except OSError as e:
        return _refuse(d, f"it cannot be read ({e.strerror})")
    if not stat.S_ISDIR(st.st_mode):
        return _refuse(d, "it is not a directory")
    if st.st_uid != os.geteuid():
        return _refuse(d, f"it belongs to another user (uid {st.st_uid})")
    if st.st_mode & 0o022:
        return _refuse(d, f"it is writable by group or others (mode {oct(st.st_mode & 0o777)})")
    writable = not ro and os.access(d, os.W_OK | os.X_OK)
    key = _key(d, writable)
    if key is None:
        return _refuse(d, "its key file is missing, unreadable or not private to this user")
    return Store(d, writable, key)


def _key(d, writable):
    """The dir's key: read (it must be a private regular file of this user), else made."""
    path = os.path.join(d, "key")
    for _ in range(3):
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        except FileNotFoundError:
            if not writable:
                return None
            _make_key(d, path)
            continue
        except OSError:
            return None
        with os.fdopen(fd, "rb") as f:
            st, key = os.fstat(fd), f.read(33)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o077:
            return None
        if len(key) == 32:
            return key
        if not writable:
            return None
        LOG.warning("gradjit: the compile cache's key %s is damaged: made anew (every entry "
                    "will be rebuilt)", path)
        os.unlink(path)
    return None


def _make_key(d, path):
    fd, tmp = tempfile.mkstemp(dir=d, prefix=".key", suffix=".tmp")   # (0600)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(os.urandom(32))
        _place(tmp, path)   # (fails where another process made it first: theirs stands)
    except FileExistsError:
        pass
    finally:
        if os.path.lexists(tmp):
            os.unlink(tmp)


def _place(tmp, path):
    """Give the complete file ``tmp`` the name ``path`` unless ``path`` exists
    (FileExistsError): a hard link, or, on a file system without them, a rename after a
    check (a race there leaves one of two identical writes)."""
    try:
        os.link(tmp, path)
    except FileExistsError:
        raise
    except OSError:
        if os.path.lexists(path):
            raise FileExistsError(path) from None
        os.replace(tmp, path)


class Store:
    """A trusted cache dir: verified reads, private atomic writes."""

    def __init__(self, root, writable, key):
        self.root, self.writable, self._key = root, writable, key
        self._folders = set()

    def path(self, *parts):
        return os.path.join(self.root, *parts)

    def folder(self, folder):
        """Make ``folder`` (inside the dir) exist, private; False where it cannot."""
        if folder in self._folders or folder == self.root:
            return True
        if not self.writable:
            return os.path.isdir(folder)
        try:
            os.mkdir(folder, 0o700)
            os.chmod(folder, 0o700)
        except FileExistsError:
            if os.path.islink(folder) or not os.path.isdir(folder):
                self.discard(folder, "is not a directory gradjit made")
                return False
        except OSError as e:
            warn_once(("write", folder), "gradjit: cannot write the compile cache at %s (%s)",
                      folder, e.strerror)
            return False
        self._folders.add(folder)
        return True

    def _mac(self, path, data):
        return hmac.new(self._key, os.path.basename(path).encode() + b"\0" + data,
                        hashlib.sha256).digest()

    def write(self, path, data, replace=True):
        """Write ``data`` (bytes) at ``path`` with its digest; False when nothing was written."""
        return self._write(path, MAGIC + self._mac(path, data) + data, replace)

    def _write(self, path, body, replace):
        folder = os.path.dirname(path)
        if not (self.writable and self.folder(folder)):
            return False
        try:
            fd, tmp = tempfile.mkstemp(dir=folder, prefix=".", suffix=".tmp")   # (0600)
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(body)
                if replace:
                    os.replace(tmp, path)
                else:
                    _place(tmp, path)
            except FileExistsError:
                pass
            finally:
                if os.path.lexists(tmp):
                    os.unlink(tmp)
        except OSError as e:
            warn_once(("write", folder), "gradjit: cannot write the compile cache at %s (%s)",
                      folder, e.strerror)
            return False
        return True

    def _raw(self, path):
        """The bytes at ``path`` (None if absent); a file that is not this user's regular
        file is discarded."""
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        except FileNotFoundError:
            return None
        except OSError as e:   # (ELOOP: a symlink)
            self.discard(path, f"cannot be opened safely ({e.strerror})")
            return None
        with os.fdopen(fd, "rb") as f:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
                self.discard(path, "is not a regular file of this user")
                return None
            return f.read()

    def read(self, path):
        """The payload at ``path`` when it verifies, else None (see the contract)."""
        raw = self._raw(path)
        if raw is None:
            return None
        body = raw[_HEAD:]
        if raw[:len(MAGIC)] != MAGIC or not hmac.compare_digest(raw[len(MAGIC):_HEAD],
                                                                self._mac(path, body)):
            self.discard(path, "does not verify (damaged, edited, or not written by gradjit)")
            return None
        return body

    def discard(self, path, why):
        warn_once(("discard", path), "gradjit: discarded %s from the compile cache: %s; "
                  "it is rebuilt", path, why)
        if self.writable:
            with contextlib.suppress(OSError):
                if os.path.isdir(path) and not os.path.islink(path):
                    shutil.rmtree(path)
                else:
                    os.unlink(path)

    def put_module(self, path, source):
        """The generated module's file holds ``source`` (written once; a file that differs
        from it, the name being its content hash, is rewritten)."""
        body = source.encode()
        raw = self._raw(path)
        if raw == body:
            return
        if raw is not None:
            self.discard(path, "differs from the source its name is the hash of")
        self._write(path, body, replace=raw is not None)


def thread_lock(name):
    """The lock this process's threads take for entry ``name`` (part of ``entry_lock``)."""
    with _GUARD:
        lock = _THREAD_LOCKS.get(name)
        if lock is None:
            lock = _THREAD_LOCKS[name] = threading.RLock()
        return lock


@contextlib.contextmanager
def entry_lock(store, name):
    """Hold the lock of entry ``name``: this process's threads and, where the dir is
    writable, other processes (a ``flock`` on ``locks/<name>.lock``)."""
    with thread_lock(name):
        fd = None
        if store is not None and store.writable and store.folder(store.path("locks")):
            path = store.path("locks", name + ".lock")
            for attempt in range(2):
                try:
                    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
                    break
                except OSError as e:
                    if e.errno == errno.ELOOP and attempt == 0:   # (a link: never followed)
                        store.discard(path, "is a symbolic link")
                        continue
                    warn_once(("lock", store.root), "gradjit: cannot take a lock in the "
                              "compile cache at %s (%s): compiling without one", store.root,
                              e.strerror)
                    break
        try:
            if fd is not None:
                fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            if fd is not None:
                os.close(fd)   # (releases the flock)


def clear(disk=False):
    """Forget the opened stores and warnings; with ``disk``, delete the current dir's
    entries too (its key stays; a ``$GRADJIT_LIBRARY_CACHE_DIR`` other cache dirs share
    is left as it is)."""
    s = current() if disk else None
    with _GUARD:
        _STORES.clear()
        _WARNED.clear()
    if s is not None and s.writable and os.path.isdir(s.root):   # (deleted meanwhile: nothing)
        for name in os.listdir(s.root):
            if name != "key":
                p = s.path(name)
                with contextlib.suppress(OSError):
                    if os.path.isdir(p) and not os.path.islink(p):
                        shutil.rmtree(p)
                    else:
                        os.unlink(p)
