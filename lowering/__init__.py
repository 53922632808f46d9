"""Stage 2: derivative formulas, reverse mode, graph passes and code generators.

Imports gradjit.tracer, never gradjit.runtime.
"""
