"""The outside-state stage of the random-program check: one input read from outside.

Contract
- ``check_outside(prog, orc, kind=None) -> Outcome | None``: the input ``prog``'s loss
  depends on most (largest finite-difference gradient) is taken out of the argument list and read, inside the function, from a holder outside
  it (``KINDS``: a dict entry, a list element, an object's attribute, a module global,
  a closure cell, or a global array changed in place). The same ``gj.jit`` and
  ``gj.grad`` objects are called before and after the holder's value changes (scaled by
  0.9: same shape and sign, so the program's domain holds); each result must be NumPy's
  value and finite differences' gradient for the state of that call. None when the
  program has one input, or when finite differences are unstable at the new state.
- Why: a compiled function that captured an outside array must see it change, whatever
  holds it (runtime/guards.py); random programs exercised only arguments.
"""
from __future__ import annotations

import dataclasses
import re
import types
import warnings

import numpy as np

KINDS = ("dict", "list", "attr", "global", "cell", "inplace")


def _function(prog, kind, state, moved):
    """(f over the inputs but input ``moved``, put(new value)) for holder ``kind``."""
    name = prog.input_names[moved]
    args = [n for k, n in enumerate(prog.input_names) if k != moved]
    read = {"dict": f"STATE[{name!r}]", "list": "STATE[0]", "attr": f"STATE.{name}",
            "global": "G_STATE", "inplace": "G_STATE", "cell": "held"}[kind]
    body = "\n".join("        " + ln for ln in prog.body_lines())
    if re.search(rf"\b{name}\b\s*(\[[^\n]*\])?\s*[-+*/@%]?=(?!=)", body):
        read = f"np.array({read})"   # (the program writes into it: as an argument, a copy)
    src = (f"def make(STATE, held):\n    def f({', '.join(args)}):\n"
           f"        {name} = {read}\n{body}\n"
           f"    def put(v):\n        nonlocal held\n        held = v\n    return f, put\n")
    from .generator import _gj
    ns = {"np": np, "gj": _gj(), "G_STATE": state}
    exec(compile(src, f"<random program {prog.seed} outside {kind}>", "exec"), ns)
    holder = {"dict": {name: state}, "list": [state],
              "attr": types.SimpleNamespace(**{name: state})}.get(kind)
    f, put_cell = ns["make"](holder, state)

    def put(v):
        if kind == "dict":
            holder[name] = v
        elif kind == "list":
            holder[0] = v
        elif kind == "attr":
            setattr(holder, name, v)
        elif kind == "global":
            ns["G_STATE"] = v
        elif kind == "inplace":
            ns["G_STATE"][...] = v
        else:
            put_cell(v)
    return f, put


def _compare(stage, got_value, got_grads, orc, keep, prog):
    from .generator import Outcome
    v = float(np.asarray(got_value))
    if abs(v - orc.value) > 1e-10 * (abs(orc.value) + orc.scale) + 1e-300:
        return Outcome("wrong", stage, f"value {v!r} != NumPy {orc.value!r}", prog=prog)
    for g, k in zip(got_grads, keep):
        fd, noise = orc.grads[k], orc.noise[k]
        tol = 1e-5 * np.abs(fd) + 1e-7 * orc.gscale + 10 * noise + 1e-10 * orc.scale + 1e-12
        g = np.asarray(g)
        if g.shape != fd.shape or not np.all(np.isfinite(g)) or np.any(np.abs(g - fd) > tol):
            return Outcome("wrong", stage, f"d/d{prog.input_names[k]}: gradjit "
                           f"{np.array2string(g, precision=6)} vs finite differences "
                           f"{np.array2string(fd, precision=6)}", prog=prog)
    return None


def check_outside(prog, orc, kind=None):
    import gradjit as gj
    from .generator import Outcome, oracle
    if len(prog.inputs) < 2:
        return None
    kind = kind or KINDS[prog.seed % len(KINDS)]
    inputs = [np.array(a, dtype=np.float64) for a in prog.inputs]
    # the input the loss depends on most (one it ignores would test nothing)
    moved = max(range(len(inputs)), key=lambda k: float(np.max(np.abs(orc.grads[k]),
                                                               initial=0.0)))
    keep = [k for k in range(len(inputs)) if k != moved]
    new = inputs[moved] * 0.9
    orc2 = oracle(dataclasses.replace(prog, inputs=[new if k == moved else a
                                                    for k, a in enumerate(inputs)]))
    if not orc2.stable:
        return None
    f, put = _function(prog, kind, inputs[moved].copy(), moved)
    stage = f"outside-{kind}"
    try:
        jit, grad = gj.jit(f), gj.grad(f, argnums=tuple(range(len(keep))))
        for state_orc in (orc, orc2):
            if state_orc is orc2:
                put(new.copy())
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                args = [inputs[k].copy() for k in keep]
                value, grads = jit(*args), grad(*[a.copy() for a in args])
            bad = _compare(stage, value, grads, state_orc, keep, prog)
            if bad is not None:
                bad.detail += " (before the change)" if state_orc is orc else \
                    " (after the outside value changed)"
                return bad
    except Exception as e:  # noqa: BLE001  (classified as check_program does)
        kind_ = "refused" if isinstance(e, gj.GradjitError) else "crash"
        return Outcome(kind_, stage, f"{type(e).__name__}: {e}", e, prog)
    return None
