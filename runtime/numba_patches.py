"""Every change gradjit makes to Numba's own behaviour: applied per compile, behind one switch.

Contract
- ``compiling(module)``: runtime/compiler.py compiles a generated module's entry inside this
  block. Holding Numba's compiler lock (every other thread's compile waits for it), the block
  swaps in, for its length only, and swaps back on the way out (errors included):
  - the module's optimisation levels: LLVM's IR passes at its ``LLVM_OPT``, its machine code
    at its ``CODEGEN_OPT`` (runtime/levels.py: ``numba.core.config.OPT``,
    ``JITCodeLibrary._finalize_specific``, ``CPUCodeLibrary._optimize_functions``);
  - called helpers bound to their loaded code instead of copied into the entry
    (runtime/links.py: ``CPUCodeLibrary.finalize``);
  - result arrays boxed without a Python call each (lowering/boxing_cpu.py: Numba's boxer of
    ``types.Array``);
  - the first time, Numba's BLAS probe answered without importing ``scipy.linalg``
    (runtime/blas_probe.py: it only decides how Numba's ``arraymath`` is first imported).
  A compile inside the block (a helper the entry calls) sees the same swaps. ``import
  gradjit`` swaps nothing: outside these blocks Numba is as shipped, so a user's own
  ``@njit`` code compiles as it would without gradjit.
- The generated modules' pipeline (lowering/pipeline_cpu.py's ``Lean``, given through Numba's
  public ``pipeline_class`` option) leaves out passes generated code never needs.
- One switch, ``GRADJIT_NUMBA_PATCHES=0`` (read at each compile: ``enabled()``), compiles with
  Numba as shipped: none of the swaps, and ``Lean`` runs Numba's whole nopython pipeline. The
  results are the same (tests/runtime/test_numba_patches.py compares them); compile time and
  call overhead differ. Code compiled either way is read back correctly by the other from
  the disk cache.
- ``STATS["blocks"]``: compiles made with the swaps in (tests read it).
- ``numpy_function_type(fn)``: the type Numba's CPU target gives NumPy's function ``fn``
  (None where it has none). While a trace runs, ``np.<name>`` is gradjit's stand-in
  (tracer/coercion.py); this is what the stand-in tells Numba it is, so a compile in
  another thread meanwhile (the background tier, the user's ``@njit`` code) types it as
  NumPy's own. Without it such a compile failed ("Use of unsupported NumPy function
  'numpy.copy'") and its structure stayed on the interpreter.

Not patches, so not here: gradjit's uses of Numba's private APIs on its own dispatchers
(loading a cached overload, its cache class: runtime/compiler.py, runtime/numba_cache.py,
``links.compile_fresh``) change nothing for any other code.
"""
from __future__ import annotations

import contextlib

from numba.core.compiler_lock import global_compiler_lock

from gradjit.lowering.boxing_cpu import env_boxing
from gradjit.lowering.pipeline_cpu import patches_enabled as enabled
from gradjit.runtime import blas_probe, levels, links

STATS = {"blocks": 0}
_DEPTH = [0]      # blocks open (a compile inside a compile keeps the outer swaps)
_ABSENT = object()


@contextlib.contextmanager
def compiling(module):
    """Compile ``module``'s functions in the block with gradjit's changes to Numba."""
    if not enabled():
        yield
        return
    blas_probe.prepare()
    with (global_compiler_lock, _methods_swapped(),
          levels.llvm_level(getattr(module, "LLVM_OPT", None)),
          levels.codegen_level(getattr(module, "CODEGEN_OPT", None)),
          links.shared_helpers(), env_boxing()):
        STATS["blocks"] += 1
        yield


@contextlib.contextmanager
def _methods_swapped():
    """Numba's code-library methods swapped for gradjit's stand-ins (levels.SWAPS,
    links.SWAPS), then restored exactly: a method the class only inherited is removed again."""
    saved = []
    if _DEPTH[0] == 0:
        for cls, name, new in levels.SWAPS + links.SWAPS:
            saved.append((cls, name, cls.__dict__.get(name, _ABSENT)))
            setattr(cls, name, new)
    _DEPTH[0] += 1
    try:
        yield
    finally:
        _DEPTH[0] -= 1
        for cls, name, old in reversed(saved):
            if old is _ABSENT:
                delattr(cls, name)
            else:
                setattr(cls, name, old)


def numpy_function_type(fn):
    """Numba's type of NumPy's function ``fn`` on the CPU target, or None (see above)."""
    from numba.core.registry import cpu_target
    try:   # (the typing registry Numba refreshed for the compile asking)
        return cpu_target.typing_context._lookup_global(fn)
    except Exception:   # noqa: BLE001 - another Numba layout: the compile fails as before
        return None
