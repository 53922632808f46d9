"""Traced integer indices are bounds-checked when they run, by every executor.

An index array passed to ``gj.grad`` / ``gj.jit`` has no value at trace time, so
the index kernels check it at run time: the compiled CPU code, the NumPy
reference interpreter (``GRADJIT_EXECUTOR=numpy``) and the CUDA launcher raise
``IndexBoundsError`` (an ``IndexError``) in NumPy's words, naming the op, the bad
value, the axis and its size, and the user's line where the runtime can tell it.
Negative indices in range wrap once, as in NumPy. Tensor mode checks concrete
indices in the front end (torch's words) and its kernels the same way.
"""
from __future__ import annotations

import pickle

import numpy as np
import pytest

import gradjit as gj
from gradjit.tracer.ops_index import IndexBoundsError, wrap_index

X3 = np.arange(3.0)
X34 = np.arange(12.0).reshape(3, 4)
HERE = "test_index_bounds.py"


def _sq_at(x, i):
    return (x[i] ** 2).sum()


@pytest.fixture(params=["grad", "jit", "interpreted"])
def run(request, monkeypatch):
    """Calls ``fn`` through gj.grad, gj.jit (compiled) or gj.grad on the interpreter."""
    if request.param == "interpreted":
        monkeypatch.setenv("GRADJIT_EXECUTOR", "numpy")
    transform = gj.jit if request.param == "jit" else gj.grad
    return lambda fn, *args: transform(fn)(*args)


@pytest.mark.parametrize("bad, first", [([0, 3], 3), ([10**9], 10**9), ([-10**9], -10**9),
                                        ([-4, 1], -4), ([1, 2, 7, -9], 7)])
def test_getitem_out_of_bounds_raises_in_every_executor(run, bad, first):
    with pytest.raises(IndexError, match=rf"index_select.default: index {first} is out of bounds "
                                         rf"for axis 0 with size 3\n  at .*{HERE}"):
        run(_sq_at, X3, np.array(bad))


def test_negative_indices_in_range_wrap_once(run):
    i = np.array([-1, 0, -3, 2])
    want = 2 * np.bincount([2, 0, 0, 2], weights=X3[[2, 0, 0, 2]], minlength=3)
    got = run(_sq_at, X3, i)
    if np.ndim(got) == 0:   # gj.jit: the value
        assert got == (X3[i] ** 2).sum()
    else:
        np.testing.assert_array_equal(got, want)


def test_the_hot_path_checks_too():
    """Later calls with the signature of the first go straight to the compiled code."""
    for f in (gj.grad(_sq_at), gj.jit(_sq_at)):
        f(X3, np.array([0, 1]))
        for bad in ([3, 0], [10**9, 0], [-10**9, 0], [-4, 0]):
            with pytest.raises(IndexError, match=rf"index_select.default: index {bad[0]} is out "
                                                 r"of bounds for axis 0 with size 3"):
                f(X3, np.array(bad))
        f(X3, np.array([-1, 2]))   # and still runs


def test_unsigned_and_narrow_index_dtypes():
    g = gj.grad(_sq_at)
    with pytest.raises(IndexError, match="index 3 is out of bounds for axis 0 with size 3"):
        g(X3, np.array([0, 3], np.uint8))
    with pytest.raises(IndexError, match="index -4 is out of bounds for axis 0 with size 3"):
        g(X3, np.array([0, -4], np.int32))
    np.testing.assert_array_equal(g(X3, np.array([2, 2], np.uint16)), [0.0, 0.0, 8.0])


def test_a_gradient_only_scatter_is_checked():
    """x[i].sum(): the forward gather is dead code; the gradient's index_add checks."""
    g = gj.grad(lambda x, i: x[i].sum())
    with pytest.raises(IndexError, match="index 5 is out of bounds for axis 0 with size 3"):
        g(X3, np.array([5, 0]))
    with pytest.raises(IndexError, match="out of bounds for axis 0 with size 3"):
        g(X3, np.array([0, -5]))   # (the hot path)
    np.testing.assert_array_equal(g(X3, np.array([-1, -1])), [0.0, 0.0, 2.0])


@pytest.mark.parametrize("i, j, msg", [
    ([0], [4], "index 4 is out of bounds for axis 1 with size 4"),
    ([3], [0], "index 3 is out of bounds for axis 0 with size 3"),
    ([-4], [0], "index -4 is out of bounds for axis 0 with size 3"),
    ([0], [-5], "index -5 is out of bounds for axis 1 with size 4"),
    ([2], [7], "index 7 is out of bounds for axis 1 with size 4")])
def test_several_index_arrays_are_checked_each_on_its_axis(run, i, j, msg):
    """x[i, j] becomes one flat index_select; each array is checked before combining (a
    flat index in range can hide a component that is not: x[0, 4] would read x[1, 0])."""
    with pytest.raises(IndexError, match=msg):
        run(lambda x, i, j: (x[i, j] ** 2).sum(), X34, np.array(i), np.array(j))


def test_several_index_arrays_in_range(run):
    i, j = np.array([-1, 0, 2]), np.array([[3], [-4]])
    got = run(lambda x, i, j: (x[i, j] ** 2).sum(), X34, i, j)
    if np.ndim(got) == 0:
        assert got == (X34[i, j] ** 2).sum()
    else:
        want = np.zeros_like(X34)
        np.add.at(want, (np.broadcast_to(i, (2, 3)), np.broadcast_to(j, (2, 3))),
                  2 * X34[i, j])
        np.testing.assert_array_equal(got, want)


# -- every op that reads an integer index tensor ---------------------------------------------
OPS = {   # name: (fn(x, i), an index in range, with negatives; one that is not; the message)
    "take": (lambda x, i: np.take(x, i), np.array([[-12, 11]]), np.array([[0, 12]]),
             "index_select.default: index 12 is out of bounds for axis 0 with size 12"),
    "take_axis": (lambda x, i: np.take(x, i, axis=1), np.array([-4, 3]), np.array([-5]),
                  "index_select.default: index -5 is out of bounds for axis 1 with size 4"),
    "take_along_axis": (lambda x, i: np.take_along_axis(x, i, axis=1),
                        np.array([[0], [-1], [3]]), np.array([[0], [4], [1]]),
                        "gather.default: index 4 is out of bounds for axis 1 with size 4"),
    "gather": (lambda x, i: x.gather(0, i), np.array([[-3, 2, 0, 1]]),
               np.array([[0, 1, -4, 2]]),
               "gather.default: index -4 is out of bounds for axis 0 with size 3"),
    "index_select": (lambda x, i: x.index_select(1, i), np.array([-1, 0]), np.array([0, 4]),
                     "index_select.default: index 4 is out of bounds for axis 1 with size 4"),
    "index_add": (lambda x, i: x.index_add(0, i, np.ones((2, 4))), np.array([-3, 2]),
                  np.array([1, 3]),
                  "index_add.default: index 3 is out of bounds for axis 0 with size 3"),
    "scatter_add": (lambda x, i: x.scatter_add(1, i, np.ones((3, 1))),
                    np.array([[-4], [3], [0]]), np.array([[0], [0], [-5]]),
                    "scatter_add.default: index -5 is out of bounds for axis 1 with size 4"),
    "embedding": (lambda w, i: gj.nn.functional.embedding(i, w), np.array([[2, -3]]),
                  np.array([[0, 3]]),
                  "index_select.default: index 3 is out of bounds for axis 0 with size 3"),
}


def _np_reference(name, x, i):
    """The forward value in plain NumPy (torch semantics where NumPy has no such op)."""
    if name == "gather":
        return np.take_along_axis(x, i, 0)
    if name == "index_select":
        return x[:, i]
    if name == "index_add":
        out = x.copy()
        np.add.at(out, i, np.ones((2, 4)))
        return out
    if name == "scatter_add":
        out = x.copy()
        np.add.at(out, (np.arange(3)[:, None], i), 1.0)
        return out
    if name == "embedding":
        return x[i]
    return OPS[name][0](x, i)


@pytest.mark.parametrize("name", sorted(OPS))
def test_each_index_op_checks_in_every_executor(run, name):
    fn, _, bad, msg = OPS[name]
    with pytest.raises(IndexError, match=msg + rf"\n  at .*{HERE}"):
        run(lambda x, i: (fn(x, i) ** 2).sum(), X34, bad)


@pytest.mark.parametrize("name", sorted(OPS))
@pytest.mark.parametrize("executor", ["numba", "numpy"])
def test_each_index_op_in_range_matches_numpy(name, executor, monkeypatch):
    monkeypatch.setenv("GRADJIT_EXECUTOR", executor)
    fn, good, _, _ = OPS[name]
    np.testing.assert_array_equal(gj.jit(fn)(X34, good), _np_reference(name, X34, good))


# -- tensor mode ---------------------------------------------------------------------------
def test_tensor_mode_checks_indices_and_keeps_negative_ones():
    x = gj.tensor(X3, requires_grad=True)
    for bad in ([3, 0], [10**9], [-10**9], [-4]):
        with pytest.raises(IndexError, match=rf"index {bad[0]} is out of bounds for dimension 0 "
                                             rf"with size 3[\s\S]*{HERE}"):
            x[gj.tensor(np.array(bad))]
    (x[gj.tensor(np.array([-1]))] ** 2).sum().backward()
    np.testing.assert_array_equal(np.asarray(x.grad), [0.0, 0.0, 4.0])


@pytest.mark.parametrize("name", ["gather", "index_select", "index_add", "scatter_add",
                                  "embedding"])
def test_tensor_mode_index_ops(name):
    fn, good, bad, _ = OPS[name]
    x = gj.tensor(X34, requires_grad=True)
    with pytest.raises(IndexError, match="out of bounds"):
        fn(x, gj.tensor(bad))
    (fn(x, gj.tensor(good)) ** 2).sum().backward()
    want = gj.grad(lambda a: (fn(a, good) ** 2).sum())(X34)
    np.testing.assert_array_equal(np.asarray(x.grad), want)


def test_tensor_mode_steps_with_changing_indices():
    """A repeated step (replayed recording) still checks each step's own indices."""
    w = gj.tensor(X3, requires_grad=True)
    for i in ([0, 1], [1, 2], [2, 0], [0, 1], [-1, 0]):
        w.grad = None
        (w[gj.tensor(np.array(i))] ** 2).sum().backward()
        want = np.zeros(3)
        np.add.at(want, np.array(i), 2 * X3[i])
        np.testing.assert_array_equal(np.asarray(w.grad), want)
    with pytest.raises(IndexError, match="index 3 is out of bounds"):
        (w[gj.tensor(np.array([0, 3]))] ** 2).sum().backward()


# -- the pieces ------------------------------------------------------------------------------
def test_reference_check_and_error_object():
    np.testing.assert_array_equal(wrap_index("op", np.array([-3, 2, -1]), 3, 0), [0, 2, 2])
    with pytest.raises(IndexBoundsError) as info:
        wrap_index("gather.default", np.array([[0, 5], [-7, 1]]), 4, 1)
    e = info.value
    assert isinstance(e, IndexError) and isinstance(e, gj.GradjitError)
    assert (e.op, e.index, e.axis, e.size, e.site) == ("gather.default", 5, 1, 4, None)
    assert str(e) == "gather.default: index 5 is out of bounds for axis 1 with size 4"
    with pytest.raises(IndexBoundsError, match="index 300 is out"):
        wrap_index("op", np.array([1, 300], np.uint16), 3, 0)
    again = pickle.loads(pickle.dumps(e))
    assert type(again) is IndexBoundsError and str(again) == str(e)


def test_a_gradient_node_names_its_forward_op():
    from gradjit.tracer.registry import Site
    e = IndexBoundsError("index_add.default", 3, 0, 3).located(
        Site(__file__, 1, "index_select.default"))
    assert str(e).startswith("index_add.default (in the gradient of index_select.default): "
                             "index 3 is out of bounds for axis 0 with size 3\n  at File")


def test_generated_source_checks_without_the_users_line():
    """The check is in the compiled source with only structural text (op, axis, size): one
    source serves every graph of that structure, whatever line recorded it."""
    src = gj.explain(gj.grad(_sq_at), X3, np.array([0, 1]))
    assert "raise IndexBoundsError('index_select.default', " in src
    assert "raise IndexBoundsError('index_add.default', " in src
    assert HERE not in src.split("== generated source ==")[-1]


def test_cuda_source_flags_and_checks_each_index_op():
    """(Source only: no GPU here; the simulator suite runs it where numba-cuda is.)"""
    from gradjit.lowering.codegen_cuda import generate_cuda
    from gradjit.lowering.cuda_pool import FLAGS
    from gradjit.tracer.api import apply
    from gradjit.tracer.trace import trace
    g, (x, i), _ = trace([X34, np.array([0, 1])])
    y = apply("index_select.default", [x, i], {"dim": 0})
    g.outputs = [apply("index_add.default", [x, i, y], {"dim": 0, "alpha": 1}).value]
    src = generate_cuda(g).source
    assert f"{FLAGS} = cm.index_flags(2)" in src
    assert f"cm.check_indices({FLAGS}, (('index_select.default', 0, 3, v" in src
    assert "bad = k < -3 or k >= 3" in src and "if not bad" in src


def _add_at_unread(x, i):
    y = x.copy()
    np.add.at(y, i, 1.0)   # (y's value: not needed for the gradient, its index checked)
    return y.sum()


def test_an_index_whose_value_is_unused_is_still_checked(run):
    # compiled code dropped the forward np.add.at as dead (the gradient of y.sum() does not
    # read y) and its bounds check with it: a gradient came back where NumPy raises
    with pytest.raises(IndexError, match=r"index 9 is out of bounds for axis 0 with size 3"):
        run(_add_at_unread, X3, np.array([0, 9]))
    np.testing.assert_array_equal(gj.grad(_add_at_unread)(X3, np.array([0, -3])), 1.0)
