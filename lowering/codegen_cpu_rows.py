"""CPU code generator, row passes: the lines ``codegen_cpu._loop`` adds to a loop that
carries a ``RowPass`` (``lowering/schedule_rows.py``).

Contract
- The loop runs over blocks of ``rows_start``'s rows of the matrix M (n, k),
  ``prange`` over blocks (the pass does n * k multiply-adds; see ROW_PASS_MIN).
- Per row i: ``t<u> = bl.rowdot(M, i, a)`` is the product's element (its
  register, also for the unit-dims views of it the loop reads); after the
  loop's own statements, ``bl.rowaxpy(s<g>, c_i, M, i)`` adds the row times
  c's element into the block's row ``s<g> = r<g>[b0]`` of the partial
  products ``r<g>`` (nb, k).
- After the loop, ``v<g>`` is the sum of the partial rows in block order
  (``bl.colsum``), shaped as the product's (k, 1) or (1, k) result: the same
  result whatever the number of threads.
"""
from __future__ import annotations

from gradjit.lowering.alloc_cpu import dtype_arg, shape_arg
from gradjit.lowering.codegen_cpu_stmt import unit_dims_view

ROW_BLOCK = 1 << 16   # matrix elements per block: enough work per block to split well


def rows_start(e, rp, n, cap):
    """Allocate the partial products; the rows per block (at most ``cap``: the block
    buffer of a stored sum in the same loop stays that small)."""
    k = rp.matrix.shape[1]
    rows = min(max(1, ROW_BLOCK // k), cap, n)
    g = rp.back.outputs[0]
    e.imports.add("from gradjit.lowering import blas_cpu as bl")
    e.emit(1, f"r{g.id} = al.zeros({shape_arg((-(-n // rows), k))}, {dtype_arg(g.dtype)})")
    a = rp.vector
    if a.shape[0] == 1:   # a' of a' @ M.T: read as the column (k, 1) rowdot takes
        col = (unit_dims_view(a.id, a.shape, (k, 1)) if e.layout.get(a, "C") == "C" else
               f"al.reshape(al.contiguous(v{a.id}), {shape_arg((k, 1))})")
        e.emit(1, f"t{a.id} = {col}")
    return rows


def rows_block(e, rp, depth):
    """The block's row of the partial products (``b0``: the block)."""
    g = rp.back.outputs[0]
    e.emit(depth, f"s{g.id} = r{g.id}[b0]")


def rows_dot(e, rp, depth, i, regs):
    """The product's element of row ``i``, first in the loop body."""
    u, a = rp.product, rp.vector
    x = f"v{a.id}" if a.shape[1] == 1 else f"t{a.id}"
    e.emit(depth, f"t{u.id} = bl.rowdot(v{rp.matrix.id}, {i}, {x})", u.node)
    for v in (u,) + rp.aliases:
        regs[v] = f"t{u.id}"


def rows_axpy(e, rp, depth, i, regs):
    """Row ``i`` times c's element into the block's partial product, last in the body."""
    g = rp.back.outputs[0]
    e.emit(depth, f"bl.rowaxpy(s{g.id}, {regs[rp.source]}, v{rp.matrix.id}, {i})", rp.back)


def rows_end(e, rp):
    """The product: the partial rows summed, as a (k, 1) or (1, k) array."""
    g = rp.back.outputs[0]
    view = "[:, None]" if g.shape[1] == 1 else "[None, :]"
    e.emit(1, f"v{g.id} = bl.colsum(r{g.id}){view}")
