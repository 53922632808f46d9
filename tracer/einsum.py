"""``einsum`` for any subscript string, by decomposition into differentiable ops.

Contract
- ``einsum(equation, *operands)`` follows ``numpy.einsum`` / ``torch.einsum``, in the
  subscript-string form and the sublist form (``einsum(a, [0, 1], b, [1, 2], [0, 2])``):
  explicit (``->``) and implicit outputs, ``...`` (broadcast batch dims,
  right-aligned), repeated labels inside one operand (diagonals), labels summed
  away, size-1 dims broadcast against a shared label.
- It records no op of its own. Each step is an op with a derivative formula:
  a repeated label is ``mul`` by a constant identity mask then ``sum``; a label
  no later step needs is summed early (``sum.dim_IntList``); two operands are
  contracted left to right as ``permute`` -> ``view`` -> ``matmul`` (``mm`` /
  ``bmm``) -> ``view``; the result is ``permute``d to the output order.
- Errors (bad subscripts, operand count, mismatched sizes) are ``ShapeError`` /
  ``ValueError`` naming ``einsum``, the equation, the shapes and the user's line.
"""
from __future__ import annotations

import numpy as np

from gradjit.tracer.registry import ShapeError, user_site


def _fail(eq, ops, msg):
    shapes = ", ".join(str(tuple(o.shape)) for o in ops)
    raise ShapeError(f"einsum('{eq}'): {msg} (operand shapes: {shapes})", user_site())


def _parse(eq, ops):
    eq = eq.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(ops):
        _fail(eq, ops, f"{len(terms)} subscript terms for {len(ops)} operands")
    labels, n_ell = [], 0
    for term, op in zip(terms, ops):
        if term.count("...") > 1 or "." in term.replace("...", ""):
            _fail(eq, ops, f"malformed ellipsis in '{term}'")
        head, ell, tail = term.partition("...")
        for ch in head + tail:
            if not ch.isalpha():
                _fail(eq, ops, f"invalid subscript {ch!r} (letters only)")
        k = op.ndim - len(head) - len(tail)
        if k < 0 or (k > 0 and not ell):
            _fail(eq, ops, f"'{term}' has {len(head) + len(tail)} labels for a {op.ndim}-d operand")
        n_ell = max(n_ell, k)
        labels.append((list(head), k, list(tail)))
    # ellipsis dims are right-aligned labels "…0", "…1", ...
    out_ops = []
    for head, k, tail in labels:
        out_ops.append(head + [f"…{n_ell - k + i}" for i in range(k)] + tail)
    ell = [f"…{i}" for i in range(n_ell)]
    if arrow:
        if rhs.count("...") > 1 or "." in rhs.replace("...", ""):
            _fail(eq, ops, f"malformed ellipsis in output '{rhs}'")
        head, has_ell, tail = rhs.partition("...")
        out = list(head) + (ell if has_ell else []) + list(tail)
        for ch in head + tail:
            if not any(ch in t for t in out_ops):
                _fail(eq, ops, f"output label {ch!r} does not appear in the inputs")
        if len(set(out)) != len(out):
            _fail(eq, ops, "an output label appears twice")
        if not has_ell and n_ell:
            _fail(eq, ops, "the output must contain '...' when the inputs do")
    else:
        counts = {}
        for t in out_ops:
            for ch in t:
                counts[ch] = counts.get(ch, 0) + 1
        out = ell + sorted(ch for ch, c in counts.items() if c == 1 and not ch.startswith("…"))
    return eq, out_ops, out


def _diagonals(x, labels, eq, ops):
    """Fold repeated labels of one operand: x * I on the two axes, summed over one."""
    labels = list(labels)
    while len(set(labels)) != len(labels):
        for i, ch in enumerate(labels):
            j = labels.index(ch, i + 1) if ch in labels[i + 1:] else -1
            if j >= 0:
                break
        n = x.shape[i]
        if x.shape[j] != n:
            _fail(eq, ops, f"label {ch!r} repeated with sizes {n} and {x.shape[j]}")
        shape = [1] * x.ndim
        shape[i] = shape[j] = n
        mask = np.eye(n, dtype=x.dtype).reshape(shape)
        x = (x * x._const(mask)).sum(j)
        labels.pop(j)
    return x, labels


def _sum_labels(x, labels, drop):
    dims = tuple(i for i, ch in enumerate(labels) if ch in drop)
    if not dims:
        return x, labels
    return x.sum(dims), [ch for ch in labels if ch not in drop]


def _expand_shared(x, lx, y, ly):
    size = {}   # a label's size: its non-1 size if any (0 included: an empty contraction)
    for t, ls in ((x, lx), (y, ly)):
        for ch, s in zip(ls, t.shape):
            if s != 1 or ch not in size:
                size[ch] = s
    for_x = tuple(size[ch] if ch in ly else s for ch, s in zip(lx, x.shape))
    for_y = tuple(size[ch] if ch in lx else s for ch, s in zip(ly, y.shape))
    return x.expand(for_x), y.expand(for_y)


def _prod(shape):
    return int(np.prod(shape)) if shape else 1


def _contract(x, lx, y, ly, keep, eq, ops):
    for ch in set(lx) & set(ly):
        a, b = x.shape[lx.index(ch)], y.shape[ly.index(ch)]
        if a != b and 1 not in (a, b):
            _fail(eq, ops, f"label {ch!r} has sizes {a} and {b}")
    x, y = _expand_shared(x, lx, y, ly)
    batch = [ch for ch in lx if ch in ly and ch in keep]
    contr = [ch for ch in lx if ch in ly and ch not in keep]
    lonly = [ch for ch in lx if ch not in ly]
    ronly = [ch for ch in ly if ch not in lx]
    sx = dict(zip(lx, x.shape))
    sy = dict(zip(ly, y.shape))
    xp = x.permute([lx.index(ch) for ch in batch + lonly + contr])
    yp = y.permute([ly.index(ch) for ch in batch + contr + ronly])
    B = _prod([sx[c] for c in batch])
    L, C, R = _prod([sx[c] for c in lonly]), _prod([sx[c] for c in contr]), _prod([sy[c] for c in ronly])
    if batch:
        z = xp.reshape(B, L, C) @ yp.reshape(B, C, R)
    else:
        z = xp.reshape(L, C) @ yp.reshape(C, R)
    out_shape = tuple(sx[c] for c in batch + lonly) + tuple(sy[c] for c in ronly)
    return z.reshape(out_shape), batch + lonly + ronly


_LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"   # NumPy's: 0 is 'A', so
#                                                         an implicit output keeps integer order


def sublist_form(args):
    """NumPy's (and torch's) other form, ``einsum(op0, sublist0, op1, sublist1, ...,
    [sublist_out])`` with integer labels 0-51 and ``...``: (equation, operands)."""
    n = len(args) // 2
    ops, subs = list(args[0:2 * n:2]), list(args[1:2 * n:2])
    out = args[2 * n] if len(args) % 2 else None

    def term(sub):
        if not isinstance(sub, (list, tuple)):
            raise TypeError(f"einsum: in the sublist form each operand is followed by a list of "
                            f"integer labels, got {type(sub).__name__}")
        chars = []
        for k in sub:
            if k is Ellipsis:
                chars.append("...")
            elif isinstance(k, (int, np.integer)) and not isinstance(k, bool) and 0 <= k < 52:
                chars.append(_LETTERS[int(k)])
            else:
                raise ValueError(f"einsum: subscript {k!r} in the sublist form must be an "
                                 f"integer in [0, 52) or Ellipsis")
        return "".join(chars)
    eq = ",".join(term(sub) for sub in subs) + ("" if out is None else "->" + term(out))
    return eq, ops


def einsum(equation, *operands):
    if not isinstance(equation, str):
        equation, operands = sublist_form((equation,) + operands)
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    like = next((o for o in operands if hasattr(o, "_apply")), None)
    if like is None:
        raise TypeError("einsum: no gradjit tensor among the operands")
    ops = [o if hasattr(o, "_apply") else like._const(np.asarray(o)) for o in operands]
    eq, labels, out = _parse(equation, ops)
    items = []
    for k, (x, ls) in enumerate(zip(ops, labels)):
        x, ls = _diagonals(x, ls, eq, ops)
        later = set(out).union(*[set(t) for j, t in enumerate(labels) if j != k])
        x, ls = _sum_labels(x, ls, {ch for ch in ls if ch not in later})
        items.append((x, ls))
    x, lx = items[0]
    for k in range(1, len(items)):
        y, ly = items[k]
        keep = set(out).union(*[set(t) for _, t in items[k + 1:]])
        x, lx = _sum_labels(x, lx, {ch for ch in lx if ch not in keep and ch not in ly})
        y, ly = _sum_labels(y, ly, {ch for ch in ly if ch not in keep and ch not in lx})
        x, lx = _contract(x, lx, y, ly, keep, eq, ops)
    x, lx = _sum_labels(x, lx, {ch for ch in lx if ch not in out})
    return x.permute([lx.index(ch) for ch in out]) if x.ndim > 1 else x
