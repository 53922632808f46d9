"""Forward mode (lowering/forward.py): result: formulas and the linearised fallback agree
with reverse mode and with finite differences."""
import numpy as np
import pytest

import gradjit as gj
from gradjit.lowering import adjoint as adjoint_mod
from gradjit.lowering.formulas import load

FUNCS = {
    "elementwise": lambda a, b: (np.tanh(a * b + 1.0) / (1.5 + np.sin(a) ** 2)).sigmoid(),
    "broadcast": lambda a, b: np.exp(-(a - b.sum(0)) ** 2) * np.sqrt(a * a + 1.0),
    "matmul": lambda a, b: (a @ b.T).relu() + abs(a.mean(1, keepdim=True)),
    "softmax": lambda a, b: a.softmax(1) * b.log_softmax(0) + (a.T.reshape(12) * 2.0).reshape(3, 4),
    "reductions": lambda a, b: a.amax(1) * b.sum(1) - a.mean(0).sum(),
}


def _jvp_reference(f, a, b, ta, tb):
    jr = gj.jacrev(f, argnums=(0, 1))(a, b)
    out_ndim = np.ndim(gj.jit(f)(a, b))
    axes_a = (list(range(out_ndim, out_ndim + a.ndim)), list(range(a.ndim)))
    axes_b = (list(range(out_ndim, out_ndim + b.ndim)), list(range(b.ndim)))
    return np.tensordot(jr[0], ta, axes_a) + np.tensordot(jr[1], tb, axes_b)


@pytest.fixture
def ab(rng):
    return (rng.uniform(0.3, 1.5, (3, 4)), rng.uniform(0.3, 1.5, (3, 4)),
            rng.normal(size=(3, 4)), rng.normal(size=(3, 4)))


@pytest.mark.parametrize("name", sorted(FUNCS))
def test_jvp_matches_reverse_mode(name, ab, interpreted):
    a, b, ta, tb = ab
    f = FUNCS[name]
    value, jt = gj.jvp(f, (a, b), (ta, tb))
    np.testing.assert_allclose(value, gj.jit(f)(a, b), rtol=1e-12)
    np.testing.assert_allclose(jt, _jvp_reference(f, a, b, ta, tb), rtol=1e-9, atol=1e-11)


@pytest.mark.parametrize("name", sorted(FUNCS))
def test_formulas_and_linearisation_agree(name, ab, interpreted, monkeypatch):
    a, b, ta, tb = ab
    f = FUNCS[name]
    with_formulas = gj.jvp(lambda x, y: f(x, y), (a, b), (ta, tb))[1]
    stripped = load()
    for e in stripped.values():
        e.forward = None
    monkeypatch.setattr(adjoint_mod, "_ENTRIES", stripped)
    linearised = gj.jvp(lambda x, y: f(x, y), (a, b), (ta, tb))[1]
    np.testing.assert_allclose(with_formulas, linearised, rtol=1e-10, atol=1e-12)


def test_jvp_matches_finite_differences(ab, interpreted):
    a, b, ta, tb = ab
    f = FUNCS["elementwise"]
    eps = 1e-6
    fd = (gj.jit(f)(a + eps * ta, b + eps * tb) - gj.jit(f)(a - eps * ta, b - eps * tb)) / (2 * eps)
    np.testing.assert_allclose(gj.jvp(f, (a, b), (ta, tb))[1], fd, rtol=1e-6, atol=1e-8)


def test_forward_formulas_are_validated(tmp_path):
    bad = tmp_path / "d.yaml"
    bad.write_text("- name: exp(Tensor self) -> Tensor\n  self: grad * result\n"
                   "  result: other_t * result\n")
    from gradjit.lowering.formulas import FormulaError
    with pytest.raises(FormulaError, match="other_t"):
        load(str(bad))


@pytest.mark.slow
def test_jacfwd_equals_jacrev_compiled(rng):
    w = rng.normal(size=(3, 2))
    x = rng.normal(size=(5, 3))

    def f(w):
        return np.tanh(x @ w).softmax(1)

    np.testing.assert_allclose(gj.jacfwd(f)(w), gj.jacrev(f)(w), rtol=1e-10, atol=1e-12)


def test_linearising_a_node_sweeps_its_own_nodes_only(interpreted, monkeypatch):
    # (each node without a forward formula ran the adjoint over the whole graph: jacfwd of a
    # 32-step unrolled RK4 took 15.8 s to trace, quadratic in its length)
    from gradjit.lowering import forward
    swept, sizes, real = [], [], forward.adjoint

    def counted(graph, outputs, seeds, wrt, rules=None, on_grad=None, start=0):
        swept.append(len(graph.nodes) - start)
        sizes.append(len(graph.nodes))
        return real(graph, outputs, seeds, wrt, rules, on_grad, start)

    monkeypatch.setattr(forward, "adjoint", counted)

    def traj(th, y):
        ys = []
        for _ in range(12):
            y = y + 0.1 * np.stack([th[0] * y[0] - y[0] * y[1], th[1] * y[0] * y[1] - y[1]])
            ys.append(y)
        return np.stack(ys)

    th, y0 = np.array([1.0, 0.5]), np.array([1.5, 1.0])
    jac = gj.jacfwd(traj)(th, y0)
    np.testing.assert_allclose(jac, gj.jacrev(traj)(th, y0), rtol=1e-12)
    assert swept and max(sizes) > 200 and max(swept) < 40
