"""Reuse of intermediate device buffers in generated CUDA modules.

Contract
- ``pool_buffers(host, results) -> (host lines, slots)`` rewrites the host
  launcher's allocations (``NAME = cuda.device_array(SHAPE, DTYPE)``) of
  buffers no result can alias into ``NAME = ws(SLOT, SHAPE, DTYPE)``: the
  module's ``cm.Workspace`` allocates each slot on its first call and hands
  the same buffer to every later call. ``slots`` counts them.
- ``entry_lines(name, args, host, results, checks=())``: the launcher's source
  lines, its body inside ``with _WS as ws:`` when any buffer is pooled. With
  ``checks`` (index ops' bounds checks, ``codegen_cuda_kernels.py``) it first
  makes their zeroed flags array ``FLAGS`` and, after every kernel, checks it
  (``cm.check_indices``).
- A buffer may alias a result when the result's name is reached from it by
  host assignments (``.reshape``, ``cm.tview``, plain renames, ...): every
  name on the right of an assignment that leads to a result is kept fresh.
  The test is conservative (any name mentioned counts), so a result never
  shares memory with a pooled buffer, and so never changes under a later call.
- Why: numba-cuda allocates with a synchronous ``cuMemAlloc`` and builds a
  ``DeviceNDArray`` in Python for each array, and frees by a deferred queue
  whose flushes synchronise the device; a W3 gradient (MLP, batch 256) made
  28 such allocations a call on the H200.
"""
from __future__ import annotations

import re

_ASSIGN = re.compile(r"^    (\w+) = (.*?)(  # .*)?$")
_ALLOC = re.compile(r"^cuda\.device_array\((.*)\)$")
_NAME = re.compile(r"\b[vpo]\d+\b")
FLAGS = "p1000000"   # (a work-buffer name: never a value's, see codegen_cuda_linalg.py)


def pool_buffers(host, results):
    deps = {}
    for line in host:
        m = _ASSIGN.match(line)
        if m and not _ALLOC.match(m.group(2)):
            deps.setdefault(m.group(1), set()).update(_NAME.findall(m.group(2)))
    fresh, stack = set(results), list(results)
    while stack:
        for d in deps.get(stack.pop(), ()):
            if d not in fresh:
                fresh.add(d)
                stack.append(d)
    out, slots = [], 0
    for line in host:
        m = _ASSIGN.match(line)
        a = m and _ALLOC.match(m.group(2))
        if a and m.group(1) not in fresh:
            line = f"    {m.group(1)} = ws({slots}, {a.group(1)}){m.group(3) or ''}"
            slots += 1
        out.append(line)
    return out, slots


def entry_lines(name, args, host, results, checks=()):
    host, slots = pool_buffers(host, results)
    if checks:
        host = ([f"    {FLAGS} = cm.index_flags({len(checks)})"] + host
                + [f"    cm.check_indices({FLAGS}, ({', '.join(checks)},))"])
    ret = [f"    return ({', '.join(results)}{',' if len(results) == 1 else ''})"]
    if not slots:
        return [f"def {name}({args}):"] + host + ret
    return ([f"_WS = cm.Workspace({slots})", "", "", f"def {name}({args}):", "    with _WS as ws:"]
            + ["    " + ln for ln in host + ret])
