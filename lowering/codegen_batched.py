"""A batched entry point around a generated CPU module (vectorised VJPs/JVPs).

Contract: ``batched_source(graph, gen_source, batched)`` returns module source
that holds the normal ``entry`` plus ``entry_batched``: the same arguments,
except that each input listed in ``batched`` carries a leading batch
dimension; it loops over the batch *inside* compiled code, calls ``entry``
per element and returns each output stacked along a new leading dimension.
Used for ``is_grads_batched=True``, ``jacobian(vectorize=True)``, ``jacrev``
and ``jacfwd``.
"""
from __future__ import annotations

from gradjit.lowering.alloc_cpu import dtype_arg as _np_dtype


def batched_source(graph, gen_source, batched):
    batched = set(batched)
    args = [f"v{v.id}" for v in graph.inputs]
    first = args[min(batched)]
    call = ", ".join(f"{a}[k]" if i in batched else a for i, a in enumerate(args))
    lines = [
        "",
        "",
        '@numba.njit(error_model="numpy", no_cfunc_wrapper=True, '
        'pipeline_class=pl.Lean)',
        f"def entry_batched({', '.join(args + ['consts'])}):",
        f"    n = {first}.shape[0]",
    ]
    for j, v in enumerate(graph.outputs):
        lines.append(f"    o{j} = np.empty((n,) + {v.shape}, {_np_dtype(v.dtype)})")
    lines.append("    for k in range(n):")
    lines.append(f"        r = entry({call}, consts)")
    for j, v in enumerate(graph.outputs):
        lines.append(f"        o{j}[k] = r[{j}]")
    outs = ", ".join(f"o{j}" for j in range(len(graph.outputs)))
    lines.append(f"    return ({outs}{',' if len(graph.outputs) == 1 else ''})")
    return gen_source + "\n".join(lines) + "\n"
