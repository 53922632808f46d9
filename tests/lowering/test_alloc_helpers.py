"""alloc_cpu's ``assign`` and ``transpose``: written out per rank (no Numba error message
to compile), they must be NumPy's ``dst[...] = src`` and ``np.transpose(a, axes)`` for
every rank, layout and permutation generated code can pass."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from gradjit.lowering import alloc_cpu as al


def _layouts(a):
    """``a``'s values in C order, Fortran order, with negative strides, and as a strided
    view of a larger array."""
    if a.ndim == 0:
        return [a]
    big = np.zeros(tuple(2 * k for k in a.shape))
    strided = big[tuple(slice(None, None, 2) for _ in a.shape)]
    strided[...] = a
    rev = tuple(slice(None, None, -1) for _ in a.shape)
    reversed_ = a[rev].copy()[rev]   # a's values, negative strides along every axis
    return [a, np.asfortranarray(a), reversed_, strided]


# Ranks past the written-out ones take NumPy's own code, whose Numba compile takes seconds
# per layout: in the slow suite (CI runs it).
_PAST = pytest.mark.slow


@pytest.mark.parametrize("ndim", [*range(5), pytest.param(5, marks=_PAST),
                                  pytest.param(6, marks=_PAST)])
def test_assign_is_numpys_for_every_rank_and_layout(ndim):
    rng = np.random.default_rng(ndim)
    shape = tuple(int(k) for k in rng.integers(1, 4, ndim))
    src = rng.normal(size=shape)
    for s in _layouts(src):
        for d in _layouts(np.zeros(shape)):
            al.assign(d, s)
            assert np.array_equal(d, src)


@pytest.mark.parametrize("ndim", [*range(1, 6), pytest.param(6, marks=_PAST)])
def test_transpose_is_numpys_view_for_every_rank_and_permutation(ndim):
    rng = np.random.default_rng(10 + ndim)
    shape = tuple(int(k) for k in rng.integers(1, 4, ndim))
    a = rng.normal(size=shape)
    perms = list(itertools.permutations(range(ndim)))
    for perm in [perms[int(i)] for i in rng.choice(len(perms), min(4, len(perms)), False)]:
        for x in _layouts(a):
            t = al.transpose(x, perm)
            ref = np.transpose(x, perm)
            assert t.shape == ref.shape and np.array_equal(t, ref)
            assert np.shares_memory(t, x)   # a view, as NumPy's


def test_an_empty_array():
    d = np.zeros((0, 3))
    al.assign(d, np.ones((0, 3)))
    assert al.transpose(np.ones((2, 0, 3)), (2, 0, 1)).shape == (3, 2, 0)
