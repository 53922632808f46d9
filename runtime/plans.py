"""Disk cache of generated source: a warm process does not run code generation again.

Contract
- ``generated(graph, name, pack_inputs, store)`` returns what
  ``lowering.codegen_cpu.generate`` would return for ``graph``, read from
  ``<cache dir>/plans/<key hash>.json`` when an earlier process stored it, else
  generated and stored (``store``: tracer/cache_store.py, None: not stored).
- The key is everything the generated text depends on: the graph's structural
  key (ops, exact attributes, shapes, dtypes, wiring), its value ids (they name
  the variables), ``name``, ``pack_inputs``, ``GRADJIT_FAST_MATH``, and a hash
  of the code that generates (``lowering/``, ``tracer/``, ``derivatives.yaml``):
  an edit to any of them is a miss, never a stale plan.
- Graphs whose attributes are not plain data (ints, floats, strings, dtypes,
  tuples of them; e.g. a custom Function class) are not cached: their text
  form need not identify them.
- ``stored(graph, name, pack_inputs, store)``: whether that file exists (tiering: a
  structure whose source is on disk loads without a compile, runtime/tiers.py).
- A file that does not verify (the store's keyed digest: truncated, edited, planted)
  is discarded with a warning before it is parsed: a miss, and replaced. Its source
  becomes code, so nothing unverified may reach it.
"""
from __future__ import annotations

import hashlib
import json
import os

import numpy as np

from gradjit.lowering.codegen_cpu import Generated, generate
from gradjit.lowering.formulas import default_path

STATS = {"plan_hits": 0, "plan_misses": 0}
_CODE = []   # the code hash, computed once per process


def _code_hash():
    if not _CODE:
        import gradjit.lowering as lowering
        import gradjit.tracer as tracer
        h = hashlib.sha256()
        for pkg in (lowering, tracer):
            d = os.path.dirname(pkg.__file__)
            for f in sorted(os.listdir(d)):
                if f.endswith(".py"):
                    with open(os.path.join(d, f), "rb") as fh:
                        h.update(f.encode() + b"\0" + fh.read())
        with open(default_path(), "rb") as fh:
            h.update(fh.read())
        _CODE.append(h.hexdigest())
    return _CODE[0]


_PLAIN = {int, float, str, bool, type(None), np.dtype}


def _plain(x):
    if type(x) is tuple:
        return all(_plain(e) for e in x)
    return type(x) in _PLAIN or isinstance(x, np.dtype)


def _key(graph, name, pack_inputs):
    # Memoised on the graph: a compile asks for it up to three times (tiering's
    # ``stored``, the compiler's ``stored``, ``generated``), and hashing a long graph's
    # structure is the costliest part of a warm load. The node count guards against a
    # graph still being built.
    memo_key = (name, bool(pack_inputs), len(graph.nodes), len(graph.outputs),
                os.environ.get("GRADJIT_FAST_MATH", "1"), _code_hash())
    memo = graph.__dict__.setdefault("_plan_keys", {})
    if memo_key not in memo:
        memo[memo_key] = _compute_key(graph, name, pack_inputs)
    return memo[memo_key]


def _compute_key(graph, name, pack_inputs):
    if not all(_plain(v) for n in graph.nodes for v in n.attrs.values()):
        return None
    k = graph.key()
    ids = (tuple(v.id for v in graph.inputs),
           tuple(v.id for n in graph.nodes for v in n.outputs),
           tuple(v.id for v in graph.outputs), graph.name)
    text = repr((k, ids, name, bool(pack_inputs), os.environ.get("GRADJIT_FAST_MATH", "1"),
                 _code_hash()))
    return hashlib.sha256(text.encode()).hexdigest()[:40]


def _read(store, path):
    raw = store.read(path)
    if raw is None:
        return None
    try:
        d = json.loads(raw)
        return Generated(d["source"], np.array([float.fromhex(c) for c in d["consts"]],
                                               dtype=np.float64),
                         bool(d["parallel"]), tuple(tuple(p) for p in d["packs"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _text(gen):
    return json.dumps({"source": gen.source, "consts": [float(c).hex() for c in gen.consts],
                       "parallel": bool(gen.parallel), "packs": [list(p) for p in gen.packs]})


def stored(graph, name, pack_inputs, store):
    """Is the generated source of ``graph`` on disk (``generated`` would read it)?"""
    key = None if store is None else _key(graph, name, pack_inputs)
    return key is not None and os.path.exists(store.path("plans", key + ".json"))


def generated(graph, name, pack_inputs, store):
    key = None if store is None else _key(graph, name, pack_inputs)
    if key is None:
        return generate(graph, name, pack_inputs=pack_inputs)
    path = store.path("plans", key + ".json")
    gen = _read(store, path)
    if gen is not None:
        STATS["plan_hits"] += 1
        return gen
    STATS["plan_misses"] += 1
    gen = generate(graph, name, pack_inputs=pack_inputs)
    store.write(path, _text(gen).encode())
    return gen
