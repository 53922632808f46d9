"""The Numba compiler pipeline of generated CPU modules: Numba's nopython pipeline, less
the passes for constructs generated code never contains.

Contract
- ``Lean`` is a ``numba.core.compiler.CompilerBase`` for ``@numba.njit(pipeline_class=...)``:
  a generated module's functions (``lowering/codegen_cpu.py``, ``codegen_batched.py``,
  the outlined steps) compile with it. It runs Numba's own nopython passes, in Numba's
  order, without those in ``SKIPPED``; a module compiled with ``parallel=True`` gets
  Numba's whole pipeline (its parfor passes lean on some of them).
- Object mode is never asked for (generated code is nopython); ``Lean`` refuses it.
- ``patches_enabled()``: gradjit's one switch for its changes to Numba
  (``GRADJIT_NUMBA_PATCHES=0`` turns them off; runtime/numba_patches.py). Off, ``Lean`` runs
  Numba's whole nopython pipeline.

Why: generated code is straight-line assignments, ``for`` loops over ``range``/``prange``,
calls of gradjit's helpers and NumPy, and one ``raise`` of a constant exception. It has no
closures, comprehensions, ``with`` blocks, ``literally``/``literal_unroll``, inlinable
(``inline="always"``) functions or overloads, and no branch whose pruning it needs to
type. The passes that look for those still walk the whole IR: on the RNN benchmark's
entry (about 700 Numba IR statements) they cost about 40 ms of a 0.65 s compile. SSA
reconstruction (and the phi stripping that undoes it before lowering) only helps
variables whose types differ between assignments, which generated code never reuses.
The passes kept: bytecode to IR, the rewrites of constant raises and getitems (the
``raise SignatureMismatch(...)`` guard needs them), type inference, the typed rewrites,
IR legalisation, lowering and the backend.
"""
from __future__ import annotations

import os

from numba.core import typed_passes as _tp
from numba.core import untyped_passes as _up
from numba.core.compiler import CompilerBase, DefaultPassBuilder
from numba.core.compiler_machinery import PassManager

SKIPPED = frozenset(
    getattr(mod, name) for mod, names in (
        (_up, ("WithLifting", "InlineClosureLikes", "RewriteSemanticConstants", "DeadBranchPrune",
               "MakeFunctionToJitFunction", "InlineInlinables", "FindLiterallyCalls",
               "LiteralUnroll", "ReconstructSSA", "LiteralPropagationSubPipelinePass")),
        (_tp, ("PreLowerStripPhis", "InlineOverloads", "NoPythonSupportedFeatureValidation",
               "DumpParforDiagnostics")))
    for name in names if hasattr(mod, name))   # (a pass another Numba lacks: nothing to skip)


def patches_enabled():
    """Whether gradjit's changes to Numba apply to the compile starting now."""
    return os.environ.get("GRADJIT_NUMBA_PATCHES", "1") != "0"


class Lean(CompilerBase):
    """Numba's nopython pipeline without ``SKIPPED`` (see the module docstring)."""

    def define_pipelines(self):
        state = self.state
        if state.flags.force_pyobject:
            raise TypeError("gradjit: generated code compiles in nopython mode only")
        if state.flags.auto_parallel.enabled or not patches_enabled():
            return [DefaultPassBuilder.define_nopython_pipeline(state)]
        pm = PassManager("gradjit_nopython")
        for part in (DefaultPassBuilder.define_untyped_pipeline(state),
                     DefaultPassBuilder.define_typed_pipeline(state),
                     DefaultPassBuilder.define_nopython_lowering_pipeline(state)):
            pm.passes.extend(p for p in part.passes if p[0] not in SKIPPED)
        pm.finalize()
        return [pm]
