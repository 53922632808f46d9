"""The front end's cache of op types: what ``Tensor._apply`` (tracer/tensor.py) knows
about an op it has seen called with inputs of the same types.

Contract
- ``SEEN``: (op name as called, each input's type: a pending input's type token,
  else its array's shape and dtype, then the attributes' ``tape.attrs_key``) ->
  ``seen``'s entry: (op, bound attributes, output types, the tape's key piece,
  the output's type token when the op may be deferred, else False). The front
  end clears it (and tracer/replay.py's ``SEEN_BY_PIECE``) at 8192 entries.
- ``type_token(out_type)``: a small int per (shape, dtype), never reused (the
  table is dropped at 65536 types, the counter goes on), so a pending Tensor's
  type is one int in ``SEEN``'s keys and two tokens never alias.
- ``deferrable(op, out_types)``: may the op be recorded without running
  (tracer/deferred.py), when deferral is on?
- Why: a step's ops are called with the same types again and again; a hit
  skips argument binding, shape inference and the key piece's construction.
"""
from __future__ import annotations

import itertools

from gradjit.tracer import replay, tape
from gradjit.tracer.deferred import _KINDS as _DEFER_KINDS

SEEN = {}
_TYPES = {}   # (shape, dtype) -> type token
_type_ids = itertools.count(1)


def type_token(out_type):
    i = _TYPES.get(out_type)
    if i is None:
        if len(_TYPES) >= 65536:
            _TYPES.clear()
        i = _TYPES[out_type] = next(_type_ids)
    return i


def deferrable(op, out_types):
    return op.kind in _DEFER_KINDS and len(out_types) == 1 and out_types[0][1].kind == "f"


def seen(op_name, raw, op, attrs, out_types, n_in, is_deferrable):
    """The ``SEEN`` entry for ``op_name`` called with attributes ``raw`` (the caller stores
    it). Replays look it up by its key piece (tracer/replay.py's ``remember``)."""
    hit = (op, attrs, out_types, tape.key_of(op.name, attrs, out_types, n_in),
           is_deferrable and type_token(out_types[0]))
    replay.remember(op_name, raw, hit)
    return hit
