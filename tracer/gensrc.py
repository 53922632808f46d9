"""Generated Python source, loaded the project's one way: a file, then importlib.

Contract
- ``load(kind, source, names)``: the module of ``source``. The file is
  ``<cache_dir()>/py/gj_<kind>_<content hash>.py``, written once through an
  atomic rename and never rewritten; it is imported with importlib under the
  same name (``sys.modules`` first, so one source is one module per process),
  with ``names`` as globals set before its body runs. None when the file can
  neither be found nor written (the caller goes without the generated code).
- ``cache_dir()``, ``write_atomic`` and ``import_file`` are what runtime/
  uses for its generated modules too (runtime/compiler.py, runtime/plans.py
  and runtime/cuda.py take them from here: the tracer stage cannot import
  runtime).
- Why a file: a generated function is a file a reader can open and a
  traceback can show, and Numba's disk cache needs a real module (the
  generated Numba modules load through ``import_file``).
"""
from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
import tempfile


def cache_dir():
    d = os.environ.get("GRADJIT_CACHE_DIR")
    if not d:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        d = os.path.join(base, "gradjit")
    os.makedirs(d, exist_ok=True)
    return d


def write_atomic(path, text, replace=False):
    """Write ``text`` (str, or bytes) to ``path`` through a temporary file and an atomic
    rename; an existing file is kept unless ``replace`` (generated modules must never be
    rewritten: their mtime is part of Numba's cache key)."""
    if os.path.exists(path) and not replace:
        return
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), suffix=".tmp")
    with os.fdopen(fd, "wb" if isinstance(text, bytes) else "w") as f:
        f.write(text)
    os.replace(tmp, path)


def import_file(path, name, names=None):
    """The module at ``path`` imported as ``name`` (the one already in ``sys.modules``
    if there is one), with ``names`` set as its globals before its body runs."""
    mod = sys.modules.get(name)
    if mod is not None:
        return mod
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    if names:
        mod.__dict__.update(names)
    sys.modules[name] = mod  # before exec: Numba's cache must see a real module
    try:
        spec.loader.exec_module(mod)
    except BaseException:
        del sys.modules[name]
        raise
    return mod


def load(kind, source, names):
    name = f"gj_{kind}_{hashlib.sha256(source.encode()).hexdigest()[:20]}"
    mod = sys.modules.get(name)
    if mod is not None:
        return mod
    try:
        d = os.path.join(cache_dir(), "py")
        os.makedirs(d, exist_ok=True)
        path = os.path.join(d, name + ".py")
        write_atomic(path, source)
    except OSError:
        return None
    return import_file(path, name, names)
