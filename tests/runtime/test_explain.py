"""gj.explain shows what runs: for a tensor, the plan its backward() then runs (the joint
forward + backward plan when the recording tape holds the history, the backward graph
otherwise), and explaining changes nothing about which plan that is."""
import io

import numpy as np

import gradjit as gj
from gradjit.runtime import engine


def _source(text):
    return text.split("== generated source ==\n")[1].rstrip("\n")


def _ran(src):
    return any(getattr(p.exe, "source", "").rstrip("\n") == src for p in engine._PLANS.values())


def test_a_tensor_explains_the_plan_its_backward_runs():
    x = np.linspace(-1, 1, 7)
    t = gj.tensor(x, requires_grad=True)
    y = (t.sin() * t * 1.25).sum()
    text = gj.explain(y, file=io.StringIO())
    assert "== joint graph" in text
    y.backward()
    np.testing.assert_allclose(t.grad.data, 1.25 * (np.cos(x) * x + np.sin(x)), rtol=1e-13)
    assert _ran(_source(text))


def test_without_the_deferred_forward_the_backward_graph_is_explained():
    old = gj.set_deferred(False)
    try:
        x = np.linspace(-1, 1, 6)
        t = gj.tensor(x, requires_grad=True)
        y = (t.exp() * t * 0.75).sum()
        text = gj.explain(y, file=io.StringIO())
        assert "== backward graph ==" in text
        y.backward()
        np.testing.assert_allclose(t.grad.data, 0.75 * np.exp(x) * (x + 1), rtol=1e-13)
        assert _ran(_source(text))
    finally:
        gj.set_deferred(old)
