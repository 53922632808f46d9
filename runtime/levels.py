"""Optimisation levels of a generated module's compile: LLVM's IR passes and its machine code.

Contract
- ``llvm_level(level)``: inside the block Numba runs LLVM's IR passes at ``level``
  (a generated module's ``LLVM_OPT``); None keeps Numba's setting. At level 1 a
  generated module's functions skip the function passes Numba runs on each module
  before linking (``_optimize_functions``): the module passes after linking run the
  same simplification (the RNN benchmark's compile: 0.480 -> 0.461 s, median of 8
  alternating in-process compiles; steady times unchanged on W1-W5).
- ``codegen_level(level)``: inside the block, the machine code of every library
  Numba finalises for a gradjit generated module (a function of a
  ``gradjit_gen_`` module defined in it) is emitted at LLVM code-generation
  level ``level`` (a module's ``CODEGEN_OPT``); None keeps Numba's, which
  is ``NUMBA_OPT`` (3 by default). Helpers first compiled inside the block
  keep Numba's level: they are cached for every later caller.
- A ``NUMBA_OPT`` the user set wins over both.
- Both swap process state for the block under Numba's compiler lock, so no other
  thread's compile sees it, and restore it on the way out (also on errors).
- ``STATS["emitted"]`` counts the objects emitted here (tests read it).

Why a code-generation level: Numba makes one target machine for its JIT, at its
level, and every module's machine code comes from it. At level 0 LLVM selects
instructions fast (FastISel) and allocates registers block by block: the RNN
benchmark's entry (2,400 instructions after the IR passes) takes 20 ms instead of
110 ms, its whole cold first gradient 1.03 -> 0.95 s (1.22 -> 1.10 s in a slower
phase of this machine), with steady times within 2%.
Loops that carry values from one iteration to the next pay for it, though (an
in-cache sum of squares of 20,000 elements: +25%): lowering/codegen_cpu.py asks
for level 0 only where the code is large and its loops do little work.

How: Numba's JIT asks its object cache for a module's machine code before it
compiles one (that is how cached code is loaded). Just before that point
(``JITCodeLibrary._finalize_specific``) the object is emitted with a target
machine made as Numba makes its own, at ``level``, and handed to that cache;
afterwards the library keeps it as its compiled object, so Numba's disk cache
stores it. Where Numba's internals differ, nothing is hooked and Numba's level
applies.

Helpers the entry calls (``blas_cpu.smm``, ``ger`` ...) whose code is already loaded
are not copied into its object (runtime/links.py); copies of any others are made at
level 0 with the rest.
"""
from __future__ import annotations

import contextlib
import os

from numba.core import config as numba_config
from numba.core.compiler_lock import global_compiler_lock

GENERATED = "gradjit_gen_"   # name prefix of generated modules (runtime/compiler.py imports them)
STATS = {"emitted": 0}
_LEVEL = [None]   # the code-generation level of the block being compiled, else None
_SKIP_FUNCTION_PASSES = [False]   # inside llvm_level(1)
_MACHINES = {}    # level -> target machine


@contextlib.contextmanager
def llvm_level(level):
    """Compile at LLVM optimisation ``level`` inside the block (None: Numba's setting).

    Numba has no per-function level: its pass builders read ``numba.core.config.OPT``
    each time they are made, so the level is swapped for the block, under Numba's
    compiler lock (every other thread's compile waits on that lock, so none sees it).
    A ``NUMBA_OPT`` the user set wins. Helpers first compiled inside the block are
    cached at this level; callers inline and optimise them again at their own.
    """
    if level is None or "NUMBA_OPT" in os.environ:
        yield
        return
    with global_compiler_lock:
        old, skip = numba_config.OPT, _SKIP_FUNCTION_PASSES[0]
        numba_config.OPT = type(old)(level)
        _SKIP_FUNCTION_PASSES[0] = int(level) <= 1 and _ORIGINAL_FUNCTION_PASSES is not None
        try:
            yield
        finally:
            numba_config.OPT, _SKIP_FUNCTION_PASSES[0] = old, skip


@contextlib.contextmanager
def codegen_level(level):
    """Emit generated modules' machine code at ``level`` inside the block (see above)."""
    if level is None or "NUMBA_OPT" in os.environ or _ORIGINAL is None:
        yield
        return
    with global_compiler_lock:
        old, _LEVEL[0] = _LEVEL[0], int(level)
        try:
            yield
        finally:
            _LEVEL[0] = old


def _machine(codegen, level):
    tm = _MACHINES.get(level)
    if tm is None:
        import llvmlite.binding as ll
        options = dict(opt=level)
        codegen._customize_tm_options(options)   # Numba's own: CPU, features, relocation
        tm = _MACHINES[level] = ll.Target.from_triple(
            ll.get_process_triple()).create_target_machine(**options)
    return tm


def defines_generated(module):
    """Whether the LLVM ``module`` defines a function of a gradjit generated module."""
    return any(GENERATED in f.name for f in module.functions if not f.is_declaration)


def generated_library(library):
    """Whether Numba's code ``library`` defines a function of a gradjit generated module."""
    return defines_generated(library._final_module)


def _finalize_specific(self):
    level = _LEVEL[0]
    if (level is None or not self._object_caching_enabled or self._compiled
            or self._compiled_object is not None or not generated_library(self)):
        return _ORIGINAL(self)
    obj = _machine(self._codegen, level).emit_object(self._final_module)
    STATS["emitted"] += 1
    self._compiled_object = obj   # what the JIT's object cache hands it (not compiled)
    _ORIGINAL(self)
    self._compiled, self._compiled_object = True, obj   # (the cache took it): for saving


def _optimize_functions(self, ll_module):
    if _SKIP_FUNCTION_PASSES[0] and defines_generated(ll_module):
        ll_module.data_layout = self._codegen._data_layout   # (what Numba's pass sets too)
        return
    _ORIGINAL_FUNCTION_PASSES(self, ll_module)


try:   # Numba's own methods this module stands in for
    from numba.core.codegen import CPUCodeLibrary, JITCodeLibrary
except ImportError:   # another Numba layout: nothing is swapped, Numba's levels apply
    CPUCodeLibrary = JITCodeLibrary = None
_ORIGINAL = getattr(JITCodeLibrary, "_finalize_specific", None)
if not (hasattr(CPUCodeLibrary, "_object_getbuffer_hook")   # (the object cache hook that
        and hasattr(CPUCodeLibrary, "_object_caching_enabled")):   # takes the object, its flag)
    _ORIGINAL = None
_ORIGINAL_FUNCTION_PASSES = getattr(CPUCodeLibrary, "_optimize_functions", None)
# Read here, never swapped here: runtime/numba_patches.py swaps these in for each compile's
# block only, (class, method name, gradjit's stand-in) each.
SWAPS = tuple((cls, name, new) for cls, name, new, old in (
    (JITCodeLibrary, "_finalize_specific", _finalize_specific, _ORIGINAL),
    (CPUCodeLibrary, "_optimize_functions", _optimize_functions, _ORIGINAL_FUNCTION_PASSES))
    if old is not None)
