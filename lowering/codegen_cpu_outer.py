"""CPU code generator: rank-1 updates as calls of cached helpers.

Contract
- ``rank_one(loop, inline, folds) -> (line, node) | None``. A fused loop that is exactly
  an outer product of a column (m, 1) and a row (1, n) (``mul.Tensor``, stored) is the
  statement ``v = bl.outer(x, y)``; that product added to an (m, n) accumulator
  (``add.Tensor``, alpha 1) with only the sum stored is ``v = bl.ger(x, y, acc)``
  (lowering/blas_cpu.py). Operands are arrays of the loop's dtype, none an inline
  constant; the helpers take rows: a folded view (codegen_cpu_fold) passes its base,
  which must be 2-D too, and a column its ``.T``. The accumulator is passed whole: a
  folded one passes its base when that has the accumulator's shape, else the loop stays
  a loop (its view statement was never emitted, so its name is not defined; the loop
  indexes the base instead).
  ``node`` is the IR node the line's comment names. Anything else: None (a loop).
- The caller applies it only to loops that would not run in parallel.
- The result is bit for bit the loop's: the same products and sums, element by element.
- Why: ``_outer`` (lowering/passes.py) writes ``(m, 1) @ (1, n)`` as a broadcast multiply
  so it fuses with the accumulation that follows. In an unrolled RNN that loop repeats for
  every step and was a function of its own in the generated module, compiled in every
  cold process (W4's outer products: 0.05-0.1 s of a 0.9 s first gradient); the helpers
  are compiled once per machine, into the package's Numba cache.
"""
from __future__ import annotations


def _operands(mul, m, n):
    """(column, row) of an outer-product ``mul`` over (m, n), or None."""
    p, q = mul.inputs
    if p.shape == (m, 1) and q.shape == (1, n):
        return p, q
    if q.shape == (m, 1) and p.shape == (1, n):
        return q, p
    return None


def _row(v, folds):
    """``v``'s elements as a row (1, k): its name, its folded base's, or a column's ``.T``."""
    base = folds.get(v, v)
    if base.ndim != 2:
        return None
    return f"v{base.id}" if base.shape[0] == 1 else f"v{base.id}.T"


def _whole(v, folds):
    """``v`` as an array of its own shape: its name, or its folded base's when that has
    ``v``'s shape; None for a folded view of another shape (no statement defines it)."""
    base = folds.get(v, v)
    return f"v{base.id}" if base.shape == v.shape else None


def rank_one(loop, inline, folds):
    if loop.rows is not None or len(loop.shape) != 2 or not 1 <= len(loop.nodes) <= 2:
        return None
    m, n = loop.shape
    mul = loop.nodes[0]
    out = mul.outputs[0]
    if mul.op != "mul.Tensor" or out.shape != (m, n) or out.dtype.kind != "f":
        return None
    ops = _operands(mul, m, n)
    if ops is None:
        return None
    args = list(ops)
    if len(loop.nodes) == 1:
        node, fn = mul, "outer"
    else:
        node, fn = loop.nodes[1], "ger"
        acc = [v for v in node.inputs if v is not out]
        if (node.op != "add.Tensor" or node.attrs.get("alpha", 1) != 1 or len(acc) != 1
                or acc[0].shape != (m, n) or out in loop.stores):
            return None
        args.append(acc[0])
    if loop.stores != [node.outputs[0]] or any(
            v in inline or v.dtype != out.dtype for v in args + [node.outputs[0]]):
        return None
    names = [_row(v, folds) for v in args[:2]] + [_whole(v, folds) for v in args[2:]]
    if None in names:
        return None
    return f"v{node.outputs[0].id} = bl.{fn}({', '.join(names)})", node
