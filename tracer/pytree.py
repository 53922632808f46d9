"""Pytrees: nested tuples, lists, dicts and namedtuples of array leaves.

Contract
- ``flatten(tree) -> (leaves, treedef)`` lists the leaves depth first (dict
  entries in their insertion order) and ``unflatten(treedef, leaves)`` rebuilds
  the same structure; ``treedef`` is hashable and compares equal for equal
  structures, so function transforms put it in their signature key.
- ``None`` is an empty subtree (no leaf), as in JAX.
- An ``OrderedDict`` comes back an ``OrderedDict`` and a ``defaultdict`` a ``defaultdict``
  with its ``default_factory`` (part of the structure, as in JAX); other dict subclasses
  come back as plain dicts.
- ``split_args(args, kwargs, static)`` is how a function transform sees a call:
  the leaves it traces (arrays, NumPy scalars, Python floats and complexes,
  tensors) and a key made of the structure, the traced leaves' shapes and
  dtypes, and the values of the static leaves (str, int, bool, callables, any
  other hashable object, and whole arguments named static); a Python float leaf is
  traced weakly (``WEAK`` in the layout, ``weak_positions``: NEP 50); an array in non-native byte
  order (``>f8`` on a little-endian machine) is traced as its native copy. ``join_args``
  puts tracers back where the traced leaves were.
- ``ravel_pytree(tree) -> (flat, unravel)``: one float64-or-promoted 1-D array
  of every leaf, and the function that splits such an array back into the tree
  (for ``scipy.optimize``).
"""
from __future__ import annotations

import collections

import numpy as np

_LEAF = None   # the treedef of a leaf


def _is_namedtuple(x):
    return isinstance(x, tuple) and hasattr(type(x), "_fields")


def flatten(tree, is_leaf=None):
    leaves = []
    return leaves, _flatten(tree, leaves, is_leaf)


def _flatten(x, leaves, is_leaf):
    if is_leaf is not None and is_leaf(x):
        leaves.append(x)
        return _LEAF
    if x is None:
        return ("none",)
    if isinstance(x, dict):
        keys = tuple(x)
        subs = tuple(_flatten(x[k], leaves, is_leaf) for k in keys)
        kind = _dict_kind(x)
        return ("dict", keys, subs) if kind is None else ("dict", keys, subs, kind)
    if _is_namedtuple(x):
        return ("namedtuple", type(x), tuple(_flatten(v, leaves, is_leaf) for v in x))
    if isinstance(x, (tuple, list)):
        return (type(x).__name__, tuple(_flatten(v, leaves, is_leaf) for v in x))
    leaves.append(x)
    return _LEAF


def _dict_kind(x):
    """What rebuilds a dict subclass the structure keeps: ``(cls, None)`` for an
    OrderedDict (or a subclass), ``(cls, default_factory)`` for a defaultdict; None for a
    plain dict or another subclass (those come back as plain dicts)."""
    if isinstance(x, collections.OrderedDict):
        return (type(x), None)
    if isinstance(x, collections.defaultdict):
        return (type(x), x.default_factory)
    return None


def unflatten(treedef, leaves):
    it = iter(leaves)
    out = _unflatten(treedef, it)
    rest = next(it, _END)
    if rest is not _END:
        raise ValueError("unflatten: more leaves than the structure holds")
    return out


_END = object()


def describe(t):
    """A structure as text, ``*`` for each leaf: ``(*, [*, *])``, ``{'w': *}`` (for errors)."""
    if t is _LEAF:
        return "*"
    kind = t[0]
    if kind == "none":
        return "None"
    if kind == "dict":
        return "{" + ", ".join(f"{k!r}: {describe(s)}" for k, s in zip(t[1], t[2])) + "}"
    if kind == "namedtuple":
        return f"{t[1].__name__}(" + ", ".join(describe(s) for s in t[2]) + ")"
    inner = ", ".join(describe(s) for s in t[1])
    return f"({inner}{',' if len(t[1]) == 1 else ''})" if kind == "tuple" else f"[{inner}]"


def _unflatten(t, it):
    if t is _LEAF:
        return next(it)
    kind = t[0]
    if kind == "none":
        return None
    if kind == "dict":
        pairs = [(k, _unflatten(s, it)) for k, s in zip(t[1], t[2])]
        if len(t) == 3:
            return dict(pairs)
        cls, factory = t[3]
        out = cls.__new__(cls)   # (the base's __init__: a subclass's own may take other args)
        if issubclass(cls, collections.OrderedDict):
            collections.OrderedDict.__init__(out, pairs)
        else:
            collections.defaultdict.__init__(out, factory, pairs)
        return out
    if kind == "namedtuple":
        return t[1](*[_unflatten(s, it) for s in t[2]])
    seq = [_unflatten(s, it) for s in t[1]]
    return tuple(seq) if kind == "tuple" else seq


def map_leaves(fn, tree):
    leaves, treedef = flatten(tree)
    return unflatten(treedef, [fn(x) for x in leaves])


def is_traced_leaf(x):
    """An array-like leaf a transform traces (the rest of the leaves are static)."""
    if isinstance(x, type) or isinstance(x, (bool, np.bool_)) and not hasattr(x, "shape"):
        return False   # (a class, np.ndarray too, has shape and dtype descriptors)
    return (hasattr(x, "shape") and hasattr(x, "dtype")) or isinstance(x, (float, complex))


class Static:
    """A static leaf or argument in a signature key: hashed and compared by value."""

    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value

    def __hash__(self):
        return hash((type(self.value), self.value))

    def __eq__(self, other):
        return (isinstance(other, Static) and type(other.value) is type(self.value)
                and other.value == self.value)


def split_args(args, kwargs, static_pos, static_names, name):
    """``(traced leaves, key, layout)`` of a call; ``layout`` rebuilds it (join_args)."""
    traced, parts = [], []
    for i, a in enumerate(args):
        parts.append(_split(a, traced, i in static_pos, name, f"argument {i}"))
    kparts = tuple((k, _split(v, traced, k in static_names, name, f"argument {k!r}"))
                   for k, v in sorted(kwargs.items()))
    sig = tuple((tuple(a.shape), np.dtype(a.dtype)) for a in traced)
    layout = (tuple(parts), kparts)
    return traced, (layout, sig), layout


def _split(a, traced, static, name, where):
    if static:
        return ("static", _hashable(a, name, where))
    leaves, treedef = flatten(a)
    kinds = []
    for leaf in leaves:
        x = leaf
        if is_traced_leaf(x):
            if not hasattr(x, "shape"):
                x = np.asarray(x)
            elif isinstance(x, np.ndarray) and not x.dtype.isnative:
                # Numba types native byte order only: the same values, swapped once here
                x = x.astype(x.dtype.newbyteorder("="))
            traced.append(x)
            kinds.append(WEAK if type(leaf) in (float, complex) else None)
        else:
            kinds.append(_hashable(x, name, where))
    return ("tree", treedef, tuple(kinds))


def _hashable(x, name, where):
    try:
        hash(x)
    except TypeError:
        raise TypeError(f"{name}: {where} holds a {type(x).__name__}, which is neither an "
                        f"array nor hashable; static arguments (str, int, bool, None, "
                        f"callables, static_argnums) must be hashable") from None
    return Static(x)


class _Weak:
    """The kind of a traced Python float (or complex) leaf in a layout: traced, as an
    array leaf (kind None) is, but weakly typed (NEP 50), so its key differs from that of
    ``np.float64(0.5)`` or ``np.array(0.5)`` (strong) in the same place."""

    __slots__ = ()
    value = 0.0   # (what an error naming the leaf's type reads)

    def __repr__(self):
        return "WEAK"


WEAK = _Weak()


def weak_positions(layout):
    """The indexes, among the traced leaves of ``layout``, of the weak (Python float) ones."""
    kinds = [k for part in (*layout[0], *(p for _, p in layout[1])) if part[0] != "static"
             for k in part[2] if k is None or k is WEAK]
    return {i for i, k in enumerate(kinds) if k is WEAK}


def join_args(layout, tracers):
    """Rebuild ``(args, kwargs)`` with ``tracers`` in place of the traced leaves."""
    it = iter(tracers)
    parts, kparts = layout
    args = [_join(p, it) for p in parts]
    kwargs = {k: _join(p, it) for k, p in kparts}
    return args, kwargs


def _join(part, it):
    if part[0] == "static":
        return part[1].value
    _, treedef, kinds = part
    return unflatten(treedef, [next(it) if k is None or k is WEAK else k.value for k in kinds])


def count_traced(part):
    """How many traced leaves one argument's part holds."""
    return 0 if part[0] == "static" else sum(k is None or k is WEAK for k in part[2])


def ravel_pytree(tree):
    """``(flat, unravel)``: the leaves of ``tree`` as one 1-D array (their promoted dtype)
    and the function that turns such an array back into ``tree``'s structure."""
    leaves, treedef = flatten(tree)
    arrays = [np.asarray(x) for x in leaves]
    shapes = [a.shape for a in arrays]
    dtypes = [a.dtype for a in arrays]
    sizes = [a.size for a in arrays]
    dtype = np.result_type(*dtypes) if arrays else np.float64
    flat = (np.concatenate([a.reshape(-1) for a in arrays]).astype(dtype) if arrays
            else np.zeros(0, dtype))

    def unravel(v):
        v = np.asarray(v)
        if v.shape != (sum(sizes),):
            raise ValueError(f"unravel: expected a 1-D array of {sum(sizes)} elements, got "
                             f"shape {v.shape}")
        out, at = [], 0
        for s, n, dt in zip(shapes, sizes, dtypes):
            out.append(v[at:at + n].reshape(s).astype(dt, copy=False))
            at += n
        return unflatten(treedef, out)
    return flat, unravel
