"""Counters for "compile cost follows structure": generated source lines and Numba compiles
of one transform at given arguments (no clocks)."""
import gradjit as gj


def lines_and_compiles(make, *args):
    """(lines of the generated module, compiles of its first call) of ``make()`` at ``args``;
    ``make`` returns a fresh transform (``gj.explain`` and the call each get one)."""
    src = gj.explain(make(), *args).split("== generated source ==")[1]
    lines = len(src.split("== what runs ==")[0].splitlines())
    before = gj.stats()["compiles"]
    make()(*args)
    return lines, gj.stats()["compiles"] - before
