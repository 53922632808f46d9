"""Minimal pytree helpers for the checker (lists, tuples, dicts, None; anything else a leaf).
Independent of gradjit's own pytree code so the checker does not trust what it tests."""
import numpy as np


def leaves(tree):
    if tree is None:
        return []
    if isinstance(tree, (list, tuple)):
        return [l for t in tree for l in leaves(t)]
    if isinstance(tree, dict):
        return [l for k in tree for l in leaves(tree[k])]
    return [tree]


def leaves_like(template, tree):
    """Leaves of `tree` read in `template`'s structure (dict keys in template order)."""
    if template is None:
        return []
    if isinstance(template, (list, tuple)):
        if not isinstance(tree, (list, tuple)) or len(tree) != len(template):
            raise AssertionError(f"GRADCHECK structure mismatch: expected {type(template).__name__} "
                                 f"of {len(template)}, got {type(tree).__name__}")
        return [l for a, b in zip(template, tree) for l in leaves_like(a, b)]
    if isinstance(template, dict):
        if not isinstance(tree, dict) or set(tree) != set(template):
            raise AssertionError("GRADCHECK structure mismatch: dict keys differ")
        return [l for k in template for l in leaves_like(template[k], tree[k])]
    return [tree]


def map_leaves(f, *trees):
    t0 = trees[0]
    if t0 is None:
        return None
    if isinstance(t0, (list, tuple)):
        out = [map_leaves(f, *(t[i] for t in trees)) for i in range(len(t0))]
        if isinstance(t0, tuple) and hasattr(t0, "_fields"):
            return type(t0)(*out)
        return type(t0)(out)
    if isinstance(t0, dict):
        return type(t0)((k, map_leaves(f, *(t[k] for t in trees))) for k in t0)
    return f(*trees)


def is_complex(tree):
    return any(np.iscomplexobj(l) for l in leaves(tree) if _numeric(l))


def _numeric(x):
    return isinstance(x, (int, float, complex, np.ndarray, np.generic)) and not isinstance(x, bool)


def randn_like(tree):
    def one(x):
        if np.ndim(x) == 0 and not isinstance(x, np.ndarray):
            return float(np.random.randn())
        return np.random.randn(*np.shape(x))
    return map_leaves(one, tree)


def ones_like(tree):
    def one(x):
        if np.ndim(x) == 0 and not isinstance(x, np.ndarray):
            return 1.0
        return np.ones(np.shape(x))
    return map_leaves(one, tree)


def axpy(a, x, y):
    """y + a*x leafwise, keeping Python scalars Python floats."""
    def one(xl, yl):
        r = yl + a * xl
        if not isinstance(yl, np.ndarray) and np.ndim(r) == 0:
            return float(r)
        return r
    return map_leaves(one, x, y)


def inner(a, b):
    """sum_i <a_i, b_i> over leaves; a may hold tracers (b is constant)."""
    total = 0.0
    for x, y in zip(leaves(a), leaves(b)):
        total = total + np.sum(x * y)
    return total


def shapes(tree):
    return [np.shape(l) for l in leaves(tree)]
