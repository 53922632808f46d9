"""gj.explain shows what runs: for a tensor, the plan its backward() then runs (the joint
forward + backward plan when the recording tape holds the history, the backward graph
otherwise), and explaining changes nothing about which plan that is."""
import io

import numpy as np

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
