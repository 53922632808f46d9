"""gj.explain shows what runs: for a tensor, the plan its backward() then runs (the joint
forward + backward plan when the recording tape holds the history, the backward graph
otherwise), and explaining changes nothing about which plan that is."""
import io

import numpy as np
import pytest

import gradjit as gj
from gradjit.runtime import engine


def _source(text):
    return text.split("== generated source ==\n")[1].split("\n\n== what runs ==")[0].rstrip("\n")


def _ran(src):
    return any(getattr(p.exe, "source", "").rstrip("\n") == src for p in engine._PLANS.values())


def _explain_then_backward(n, loss, want, title):
    x = np.linspace(-1, 1, n)
    t = gj.tensor(x, requires_grad=True)
    y = loss(t)
    text = gj.explain(y, file=io.StringIO())
    assert title in text
    y.backward()
    np.testing.assert_allclose(t.grad.data, want(x), rtol=1e-13)
    assert _ran(_source(text))


def test_a_tensor_explains_the_plan_its_backward_runs():
    _explain_then_backward(7, lambda t: (t.sin() * t * 1.25).sum(),
                           lambda x: 1.25 * (np.cos(x) * x + np.sin(x)), "== joint graph")


def test_without_the_deferred_forward_the_backward_graph_is_explained():
    old = gj.set_deferred(False)
    try:
        _explain_then_backward(6, lambda t: (t.exp() * t * 0.75).sum(),
                               lambda x: 0.75 * np.exp(x) * (x + 1), "== backward graph ==")
    finally:
        gj.set_deferred(old)


def _pytree_loss(p, scale, *, shift):
    return ((p["w"] * scale + shift) ** 2).sum() + (p["b"][0] * p["b"][1]).sum()


def test_a_function_is_explained_with_the_arguments_its_gradient_traces():
    # Pytree arguments, a static argument and a keyword reach the transform as a call
    # passes them: the explained program is the one gj.grad then runs (it was traced from
    # np.asarray of each argument: a dict failed as dtype object, a tuple became one array).
    from gradjit.runtime import tiers
    th = np.array([0.1, 0.2, 0.3])
    p, shift = {"w": th, "b": (th + 1, th - 1)}, 0.5 * th
    text = gj.explain(_pytree_loss, p, 2, static_argnums=1, shift=shift, file=io.StringIO())
    assert text.split("\n")[1] == ("_pytree_loss(%0:float64[3], %1:float64[3], %2:float64[3], "
                                   "%3:float64[3]) {")
    df = gj.grad(_pytree_loss, static_argnums=1)
    got = df(p, 2, shift=shift)
    np.testing.assert_allclose(got["w"], 4 * (2 * th + shift), rtol=1e-14)
    np.testing.assert_allclose(got["b"][0], p["b"][1], rtol=1e-14)
    gj.wait_compiled()
    assert tiers.settled(df.entry_for(p, 2, shift=shift)).source.rstrip("\n") == _source(text)

    pair = gj.explain(lambda q: (q[0] * q[1]).sum(), (th, 2 * th), file=io.StringIO())
    assert pair.split("\n")[1] == "<lambda>(%0:float64[3], %1:float64[3]) {"


def test_explain_takes_the_options_of_the_transform_it_builds_or_is_given():
    th = np.array([0.5, -1.0])
    aux = gj.explain(lambda x: ((x ** 2).sum(), x * 3), th, has_aux=True, file=io.StringIO())
    assert "mul.Scalar(%0, other=3)" in aux
    second = gj.explain(lambda a, b: (a * b).sum(), th, th + 1, argnums=1, file=io.StringIO())
    assert second.split("\n")[1] == "<lambda>(%0:float64[2], %1:float64[2]) {"
    df = gj.grad(lambda a, b: (a * b).sum(), argnums=1)
    with pytest.raises(TypeError, match="argnums given to explain, but a transform is "
                                        "explained with its own options"):
        gj.explain(df, th, th, argnums=0)
    t = gj.tensor(th, requires_grad=True)
    with pytest.raises(TypeError, match="takes no arguments"):
        gj.explain((t * t).sum(), th)
