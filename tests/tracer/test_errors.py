"""User mistakes give clear errors naming the op, the shapes/dtypes and the user's line."""
import os

import numpy as np
import pytest

import gradjit as gj
import gradjit.tracer.registry

THIS_FILE = os.path.basename(__file__)


def assert_names_line(exc, line_text):
    """str(exc) names this test file and the text of the user's source line."""
    msg = str(exc.value if hasattr(exc, "value") else exc)
    assert THIS_FILE in msg, msg
    assert line_text in msg, msg


# -- requires_grad on an integer tensor ------------------------------------------------
def test_integer_tensor_requires_grad():
    with pytest.raises(gj.GradjitError) as ei:
        gj.tensor(np.arange(3), requires_grad=True)  # int-requires-grad
    msg = str(ei.value)
    assert "floating point" in msg
    assert "int64" in msg and "(3,)" in msg
    assert_names_line(ei, "gj.tensor(np.arange(3), requires_grad=True)  # int-requires-grad")


def test_integer_tensor_requires_grad_setter():
    t = gj.tensor(np.arange(4, dtype=np.int32))
    with pytest.raises(gj.GradjitError) as ei:
        t.requires_grad_()  # int-requires-grad-setter
    assert "int32" in str(ei.value) and "(4,)" in str(ei.value)
    assert_names_line(ei, "t.requires_grad_()  # int-requires-grad-setter")


# -- broadcasting ----------------------------------------------------------------------
def test_broadcast_mismatch_tensor_mode():
    a = gj.tensor(np.ones(3), requires_grad=True)
    b = gj.tensor(np.ones(4, np.float32))
    with pytest.raises(gj.ShapeError) as ei:
        a + b  # broadcast-tensor-mode
    msg = str(ei.value)
    assert "add.Tensor" in msg
    assert "(3,)" in msg and "(4,)" in msg
    assert "float64" in msg and "float32" in msg
    assert_names_line(ei, "a + b  # broadcast-tensor-mode")
    assert isinstance(ei.value, ValueError)  # as NumPy / torch


def test_broadcast_mismatch_inside_grad(interpreted):
    def f(a, b):
        return (a * b).sum()  # broadcast-in-grad

    with pytest.raises(gj.ShapeError) as ei:
        gj.grad(f)(np.ones(3), np.ones(4))
    msg = str(ei.value)
    assert "mul.Tensor" in msg
    assert "(3,)" in msg and "(4,)" in msg and "float64" in msg
    assert_names_line(ei, "return (a * b).sum()  # broadcast-in-grad")


def test_broadcast_mismatch_inside_jit_with_captured_array(interpreted):
    w = np.ones((2, 5))

    @gj.jit
    def f(x):
        return np.tanh(x) - w  # broadcast-in-jit

    with pytest.raises(gj.ShapeError) as ei:
        f(np.ones((2, 3)))
    msg = str(ei.value)
    assert "sub.Tensor" in msg and "(2, 3)" in msg and "(2, 5)" in msg
    assert_names_line(ei, "return np.tanh(x) - w  # broadcast-in-jit")


# -- matmul ----------------------------------------------------------------------------
def test_matmul_shape_mismatch_2d():
    a = gj.tensor(np.ones((2, 3)), requires_grad=True)
    b = gj.tensor(np.ones((2, 3)))
    with pytest.raises(gj.ShapeError) as ei:
        a @ b  # matmul-2d
    msg = str(ei.value)
    assert "matmul" in msg  # the op the user wrote
    assert msg.count("(2, 3)") >= 2 and "float64" in msg
    assert_names_line(ei, "a @ b  # matmul-2d")


def test_matmul_shape_mismatch_1d_names_user_shapes():
    """A vector operand is promoted internally; the message must still show the user's shapes."""
    a = gj.tensor(np.ones(3), requires_grad=True)
    b = gj.tensor(np.ones((4, 5)))
    with pytest.raises(gj.ShapeError) as ei:
        a @ b  # matmul-1d
    msg = str(ei.value)
    assert "(3,)" in msg and "(4, 5)" in msg, msg
    assert_names_line(ei, "a @ b  # matmul-1d")


def test_matmul_shape_mismatch_inside_grad(interpreted):
    def f(w, x):
        return np.matmul(x, w).sum()  # matmul-in-grad

    with pytest.raises(gj.ShapeError) as ei:
        gj.grad(f)(np.ones((4, 2)), np.ones((5, 3)))
    msg = str(ei.value)
    assert "matmul" in msg and "(5, 3)" in msg and "(4, 2)" in msg
    assert_names_line(ei, "return np.matmul(x, w).sum()  # matmul-in-grad")


# -- backward of a non-scalar ------------------------------------------------------------
def test_backward_non_scalar_without_gradient(interpreted):
    x = gj.tensor(np.ones((2, 3)), requires_grad=True)
    y = x * 2.0  # non-scalar-forward
    with pytest.raises((RuntimeError, gj.GradjitError)) as ei:
        y.backward()
    msg = str(ei.value)
    assert "grad can be implicitly created only for scalar outputs" in msg
    assert "(2, 3)" in msg
    assert "mul.Scalar" in msg or "MulBackward0" in msg, msg
    assert_names_line(ei, "y = x * 2.0  # non-scalar-forward")


def test_autograd_grad_non_scalar_without_gradient(interpreted):
    x = gj.tensor(np.ones(4), requires_grad=True)
    y = x.exp()  # non-scalar-exp
    with pytest.raises((RuntimeError, gj.GradjitError)) as ei:
        gj.autograd.grad([y], [x])
    msg = str(ei.value)
    assert "grad can be implicitly created only for scalar outputs" in msg
    assert "(4,)" in msg
    assert_names_line(ei, "y = x.exp()  # non-scalar-exp")


def _line_of(marker):
    with open(__file__) as f:
        return next(i for i, ln in enumerate(f, 1) if marker in ln and "_line_of" not in ln)


def _square_sum(t):
    return (t * t).sum()  # helper-line


def test_recorded_ops_name_the_users_line_from_every_entry_point(rng):
    # tensor mode records each op's line as (code, offset) and looks it up when read
    # (GradFn.site): each way into the front end starts its walk at another depth
    x = gj.tensor(rng.normal(size=3), requires_grad=True)
    ops = {
        "operator": x * x,  # entry-operator
        "reflected": 2.0 * x,  # entry-reflected
        "ufunc": np.tanh(x),  # entry-ufunc
        "method": x.sum(),  # entry-method
        "matmul": x @ x,  # entry-matmul
        "negation": -x,  # entry-negation
        "helper": _square_sum(x),
        "functional": gj.nn.functional.mse_loss(x, gj.tensor(np.zeros(3))),  # entry-functional
        "after": x - 1.0,  # entry-after
    }
    ops["multiline"] = (x
                        + 1.0)  # entry-multiline
    lines = {"operator": "entry-operator", "reflected": "entry-reflected", "ufunc": "entry-ufunc",
             "method": "entry-method", "matmul": "entry-matmul", "negation": "entry-negation",
             "helper": "helper-line", "multiline": "entry-multiline",
             "functional": "entry-functional", "after": "entry-after"}
    for name, t in ops.items():
        site = t.grad_fn.site
        assert site is not None and os.path.basename(site.filename) == THIS_FILE, name
        assert site.lineno == _line_of(lines[name]) or (   # (3.11 names the operator's line)
            name == "multiline" and site.lineno == _line_of(lines[name]) - 1), (name, site.lineno)
        assert t.grad_fn.site is site   # looked up once


def test_an_op_called_from_c_with_no_python_caller_records_no_line(rng):
    import _thread
    import time
    x = gj.tensor(rng.normal(size=3), requires_grad=True)
    out = []
    # list.extend and map are C: the new thread's stack holds no Python frame above
    # x.__mul__, so the frames the line lookup skips do not exist
    _thread.start_new_thread(out.extend, (map(x.__mul__, [x]),))
    for _ in range(1000):
        if out:
            break
        time.sleep(0.01)
    assert out and out[0].grad_fn is not None
    assert out[0].grad_fn.site is None
    out[0].sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), 2 * x.detach().numpy())


# -- Python control flow on traced values -------------------------------------------------
@pytest.mark.parametrize("transform", [gj.jit, gj.grad], ids=["jit", "grad"])
def test_python_if_on_traced_value(interpreted, transform):
    def f(x):
        s = x.sum()
        if s > 0:  # traced-if
            return s * 2.0
        return s

    with pytest.raises(gj.TracerValueError) as ei:
        transform(f)(np.ones(3))
    msg = str(ei.value)
    assert "np.where" in msg
    assert "static_argnums" in msg
    assert_names_line(ei, "if s > 0:  # traced-if")
    assert isinstance(ei.value, TypeError)


@pytest.mark.parametrize("transform", [gj.jit, gj.grad], ids=["jit", "grad"])
def test_float_of_traced_value(interpreted, transform):
    def f(x):
        scale = float(x.sum())  # traced-float
        return x.sum() * scale

    with pytest.raises(gj.TracerValueError) as ei:
        transform(f)(np.ones(3))
    assert "np.where" in str(ei.value) and "static_argnums" in str(ei.value)
    assert_names_line(ei, "scale = float(x.sum())  # traced-float")


@pytest.mark.parametrize("transform", [gj.jit, gj.grad], ids=["jit", "grad"])
def test_numpy_scalar_type_of_traced_value_names_the_call(interpreted, transform):
    # np.float64(v) / np.float32(v) make a number in C (no protocol reaches gradjit): the
    # error names the call and the user's line, and says to cast with astype
    def f64(x):
        return np.float64(x.sum()) * 2.0  # traced-f64

    def f32(x):
        return np.float32(x[0]) * 2.0  # traced-f32
    for f, call in ((f64, "np.float64(x.sum())"), (f32, "np.float32(x[0])")):
        with pytest.raises(gj.TracerValueError) as ei:
            transform(f)(np.ones(3))
        assert str(ei.value).startswith(call + ":") and "astype" in str(ei.value)
        assert_names_line(ei, f"return {call} * 2.0  # traced-f{call[8:10]}")


@pytest.mark.parametrize("transform", [gj.jit, gj.grad], ids=["jit", "grad"])
def test_format_spec_of_traced_value(interpreted, transform):
    seen = []

    def f(x):
        seen.append(f"{x.sum()}")   # (no spec: the repr, as any object's)
        print(f"loss={x.sum():.3f}")  # traced-format
        return x.sum()

    with pytest.raises(gj.TracerValueError) as ei:
        transform(f)(np.ones(3))
    assert "'.3f'" in str(ei.value) and "outside the traced function" in str(ei.value)
    assert_names_line(ei, 'print(f"loss={x.sum():.3f}")  # traced-format')
    assert isinstance(ei.value, TypeError) and seen[0].startswith("Tracer(")


def test_static_argnums_avoids_the_error(interpreted):
    def f(x, flag):
        return x.sum() * 2.0 if flag else x.sum()

    g = gj.grad(f, static_argnums=(1,))
    np.testing.assert_allclose(g(np.ones(3), True), 2.0 * np.ones(3))
    np.testing.assert_allclose(g(np.ones(3), False), np.ones(3))


# -- unsupported NumPy function ----------------------------------------------------------
def test_unsupported_numpy_function_on_tensor():
    t = gj.tensor(np.ones(3), requires_grad=True)
    with pytest.raises(TypeError) as ei:
        np.unique(t)  # unsupported-np-tensor
    msg = str(ei.value)
    assert "np.unique" in msg and "not supported" in msg
    assert_names_line(ei, "np.unique(t)  # unsupported-np-tensor")


def test_unsupported_numpy_function_inside_jit(interpreted):
    @gj.jit
    def f(x):
        return np.unique(x).sum()  # unsupported-np-jit

    with pytest.raises(TypeError) as ei:
        f(np.ones(3))
    msg = str(ei.value)
    assert "np.unique" in msg and "not supported" in msg
    assert_names_line(ei, "return np.unique(x).sum()  # unsupported-np-jit")


def test_a_library_function_meeting_a_traced_value_names_the_users_line(interpreted):
    scipy_signal = pytest.importorskip("scipy.signal")

    @gj.grad
    def f(x):
        return scipy_signal.lfilter([1.0, 0.5], [1.0], x).sum()  # library-call

    with pytest.raises(gj.GradjitError) as ei:
        f(np.arange(4.0))
    assert_names_line(ei, "return scipy_signal.lfilter([1.0, 0.5], [1.0], x).sum()  # library-call")
    msg = str(ei.value)
    assert "inside library code gradjit does not trace" in msg and "_signaltools.py" in msg


def test_unsupported_ufunc_method_on_tensor():
    t = gj.tensor(np.ones(3))
    with pytest.raises(TypeError, match=r"np\.add\.reduceat"):
        np.add.reduceat(t, [0, 1])


# -- backward through a freed graph ----------------------------------------------------------
def _saving_graph():
    x = gj.tensor(np.array([0.5, -1.0, 2.0]), requires_grad=True)
    y = (x.exp() * x).sum()  # exp saves its result, mul saves both inputs
    return x, y


def test_second_backward_through_freed_graph(interpreted):
    x, y = _saving_graph()
    y.backward()
    with pytest.raises(RuntimeError, match="Trying to backward through the graph a second time"):
        y.backward()
    with pytest.raises(RuntimeError, match="retain_graph=True"):
        gj.autograd.grad([y], [x])


def test_retain_graph_allows_second_backward(interpreted):
    x, y = _saving_graph()
    xs = np.array([0.5, -1.0, 2.0])
    expected = np.exp(xs) * (1 + xs)
    y.backward(retain_graph=True)
    np.testing.assert_allclose(np.asarray(x.grad), expected)
    y.backward(retain_graph=True)
    np.testing.assert_allclose(np.asarray(x.grad), 2 * expected)
    y.backward()  # the last one may free
    np.testing.assert_allclose(np.asarray(x.grad), 3 * expected)
    with pytest.raises(RuntimeError, match="Trying to backward through the graph a second time"):
        y.backward()


# -- op registry -----------------------------------------------------------------------------
def test_unknown_op_names_the_registry():
    with pytest.raises(KeyError) as ei:
        gradjit.tracer.registry.get_op("nope.default")
    msg = str(ei.value)
    assert "'nope.default'" in msg
    assert "op registry" in msg
    assert "mul.Tensor" in msg  # lists what is known
    assert isinstance(ei.value, gj.GradjitError)
