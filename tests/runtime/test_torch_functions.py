"""torch-style module functions (``gj.narrow(t, ...)``, ``gj.clone(t)`` ...) against the
tensor's own method: for every ``gj.<name>`` that mirrors a ``Tensor`` method, the two
forms agree in values, in view-ness (``np.shares_memory``) and, where the method returns
a view, in what an in-place write through it does to the base and to the gradients.
torch is an optional oracle (the tests do not need it)."""
import numpy as np
import pytest

import gradjit as gj
from gradjit.tracer import tensor_views
from gradjit.tracer.torch_functions import FUNCTIONS

_R = np.random.default_rng(0)
_M = _R.standard_normal((4, 4))
A = _M @ _M.T + 4 * np.eye(4)     # square, symmetric positive definite, positive entries
A = np.abs(A) + np.eye(4)         # (still positive definite: diagonally dominant)
B = np.abs(_R.standard_normal((4, 4))) + 0.5
V = np.array([0.5, 1.5, 2.0, 3.0])
IDX = np.array([[0, 1, 2, 3], [3, 2, 1, 0]])

# Arguments after the tensor (a (4, 4) tensor, or the shape its name needs) for each
# method that needs any; every other name is called with the tensor alone.
ARGS = {
    "add": lambda: (gj.tensor(B),), "sub": lambda: (gj.tensor(B),),
    "subtract": lambda: (gj.tensor(B),), "mul": lambda: (gj.tensor(B),),
    "multiply": lambda: (gj.tensor(B),), "div": lambda: (gj.tensor(B),),
    "divide": lambda: (gj.tensor(B),), "true_divide": lambda: (gj.tensor(B),),
    "rsub": lambda: (gj.tensor(B),), "pow": lambda: (1.5,),
    "atan2": lambda: (gj.tensor(B),), "arctan2": lambda: (gj.tensor(B),),
    "copysign": lambda: (gj.tensor(-B),), "fmax": lambda: (gj.tensor(B),),
    "fmin": lambda: (gj.tensor(B),), "fmod": lambda: (gj.tensor(B),),
    "hypot": lambda: (gj.tensor(B),), "logaddexp": lambda: (gj.tensor(B),),
    "logaddexp2": lambda: (gj.tensor(B),), "maximum": lambda: (gj.tensor(B),),
    "minimum": lambda: (gj.tensor(B),), "remainder": lambda: (gj.tensor(B),),
    "xlogy": lambda: (gj.tensor(B),), "eq": lambda: (gj.tensor(B),),
    "ne": lambda: (gj.tensor(B),), "lt": lambda: (gj.tensor(B),), "le": lambda: (gj.tensor(B),),
    "gt": lambda: (gj.tensor(B),), "ge": lambda: (gj.tensor(B),),
    "addcdiv": lambda: (gj.tensor(B), gj.tensor(A)), "addcmul": lambda: (gj.tensor(B), gj.tensor(A)),
    "lerp": lambda: (gj.tensor(B), 0.25),
    "addmm": lambda: (gj.tensor(B), gj.tensor(A)), "addmv": lambda: (gj.tensor(B), gj.tensor(V)),
    "addr": lambda: (gj.tensor(V), gj.tensor(V)), "mm": lambda: (gj.tensor(B),),
    "matmul": lambda: (gj.tensor(B),), "mv": lambda: (gj.tensor(V),),
    "kron": lambda: (gj.tensor(B),), "cholesky_solve": lambda: (gj.tensor(np.linalg.cholesky(A)),),
    "clamp": lambda: (2.0, 5.0), "clip": lambda: (2.0, 5.0), "clamp_max": lambda: (3.0,),
    "clamp_min": lambda: (3.0,), "polygamma": lambda: (1,),
    "cummax": lambda: (1,), "cummin": lambda: (1,), "cumprod": lambda: (1,),
    "cumsum": lambda: (0,), "logcumsumexp": lambda: (1,), "dist": lambda: (gj.tensor(B),),
    "kthvalue": lambda: (2,), "topk": lambda: (2,), "softmax": lambda: (1,),
    "log_softmax": lambda: (0,), "broadcast_to": lambda: ((2, 4, 4),),
    "chunk": lambda: (2,), "split": lambda: (2,), "narrow": lambda: (0, 1, 2),
    "select": lambda: (1, 2), "gather": lambda: (1, gj.tensor(IDX)),
    "index_select": lambda: (0, gj.tensor(np.array([2, 0]))),
    "index_add": lambda: (0, gj.tensor(np.array([1, 3])), gj.tensor(B[:2])),
    "masked_fill": lambda: (gj.tensor(A > 5), 0.0), "masked_select": lambda: (gj.tensor(A > 5),),
    "moveaxis": lambda: (0, 1), "movedim": lambda: (1, 0), "permute": lambda: (1, 0),
    "swapaxes": lambda: (0, 1), "swapdims": lambda: (1, 0), "transpose": lambda: (0, 1),
    "repeat": lambda: (2, 1), "repeat_interleave": lambda: (2,), "reshape": lambda: (2, 8),
    "roll": lambda: (1,), "unsqueeze": lambda: (1,), "take": lambda: (gj.tensor(IDX),),
    "take_along_dim": lambda: (gj.tensor(IDX), 0),
    "scatter": lambda: (1, gj.tensor(IDX), gj.tensor(B[:2])),
    "scatter_add": lambda: (1, gj.tensor(IDX), gj.tensor(B[:2])),
    "sum_to_size": lambda: (1, 4), "tile": lambda: ((2, 1),),
    "logical_and": lambda: (gj.tensor(B > 1),), "logical_or": lambda: (gj.tensor(B > 1),),
    "logical_xor": lambda: (gj.tensor(B > 1),), "unflatten": lambda: (1, (2, 2)),
}
# The names whose input is not the (4, 4) matrix.
INPUT = {"bmm": np.stack([A, B]), "baddbmm": np.stack([A, B]), "addbmm": A,
         "dot": V, "vdot": V, "outer": V, "ger": V}
ARGS.update({
    "bmm": lambda: (gj.tensor(np.stack([B, A])),),
    "baddbmm": lambda: (gj.tensor(np.stack([B, A])), gj.tensor(np.stack([A, B]))),
    "addbmm": lambda: (gj.tensor(np.stack([B, A])), gj.tensor(np.stack([A, B]))),
    "dot": lambda: (gj.tensor(V[::-1].copy()),), "vdot": lambda: (gj.tensor(V[::-1].copy()),),
    "outer": lambda: (gj.tensor(V),), "ger": lambda: (gj.tensor(V),),
})

MIRRORED = sorted(n for n in FUNCTIONS if hasattr(gj.Tensor, n) and getattr(gj, n) is FUNCTIONS[n])


def _leaves(r):
    return list(r) if isinstance(r, (tuple, list)) else [r]


def _viewness(piece, base):
    """(a registered view of ``base``, shares memory with it): gradjit's views of a
    tensor are registered (tracer/tensor_views.py) and need not share its memory."""
    if not isinstance(piece, gj.Tensor):
        return (False, False)
    v = tensor_views.info(piece)
    return (v is not None and v.base is base,
            bool(np.shares_memory(np.asarray(piece), np.asarray(base))))


def _call(name, form, base):
    args = ARGS.get(name, lambda: ())()
    return getattr(gj, name)(base, *args) if form == "function" else getattr(base, name)(*args)


def test_every_mirrored_function_calls_the_tensors_own_method():
    """Structural: ``gj.f(t, ...)`` is ``type(t).f(t, ...)`` for every mirrored name (a
    subclass's override is what runs), so no function form can bypass an override."""
    assert len(MIRRORED) > 150 and {"narrow", "split", "chunk", "diagonal", "detach",
                                     "clone", "t", "transpose", "unbind"} <= set(MIRRORED)

    class Spy(gj.Tensor):
        pass
    marker = object()
    for name in MIRRORED:
        setattr(Spy, name, lambda self, *a, _n=name, **k: (marker, _n, a, k))
    t = Spy(np.ones(3))
    for name in MIRRORED:
        assert getattr(gj, name)(t, 1, k=2) == (marker, name, (1,), {"k": 2}), name


@pytest.mark.parametrize("name", MIRRORED)
def test_function_form_matches_method_form(name):
    data = INPUT.get(name, A)
    outs = {}
    for form in ("function", "method"):
        base = gj.tensor(data, requires_grad=data.dtype.kind == "f") * 1.0
        r = _call(name, form, base)
        outs[form] = [(np.array(x.detach() if isinstance(x, gj.Tensor) else x), _viewness(x, base))
                      for x in _leaves(r)]
    f, m = outs["function"], outs["method"]
    assert len(f) == len(m), name
    for (a, va), (b, vb) in zip(f, m):
        np.testing.assert_array_equal(a, b, err_msg=name)
        assert va == vb, f"{name}: the function form's view-ness differs from the method's"


def _write_through(name, form):
    """``h = x * 1`` (x a leaf), then ``mul_(5)`` on every piece of ``f(h)`` that is a view
    (registered, or sharing memory: ``detach``), then backward of ``(h * h).sum()``: h's
    values and x's gradient, or the error's type."""
    x = gj.tensor(INPUT.get(name, A), requires_grad=True)
    h = x * 1.0
    pieces = _leaves(_call(name, form, h))
    is_view = [any(_viewness(p, h)) for p in pieces]
    assert any(is_view), f"{name} is expected to return a view"
    try:
        for piece, view in zip(pieces, is_view):
            if view:
                piece.mul_(5.0)
        (h * h).sum().backward()
    except Exception as e:   # (both forms must refuse alike: split's pieces, expand ...)
        return type(e), str(e)
    return h.detach().numpy().copy(), x.grad.numpy().copy()


@pytest.mark.parametrize("name", [n for n in MIRRORED if n in {
    "narrow", "split", "chunk", "diagonal", "detach", "t", "transpose", "swapaxes",
    "permute", "squeeze", "unsqueeze", "reshape", "flatten", "ravel", "broadcast_to", "select",
    "unflatten",
    "unbind", "movedim", "moveaxis", "swapdims"}])
def test_in_place_write_through_function_form_matches_method_form(name):
    f, m = _write_through(name, "function"), _write_through(name, "method")
    if isinstance(f[0], type):
        assert f[0] is m[0], (name, f, m)
        return
    for a, b in zip(f, m):
        np.testing.assert_array_equal(a, b, err_msg=name)


def test_narrow_function_writes_through_to_its_base():
    x = gj.tensor(np.ones((2, 3)), requires_grad=True)
    h = x * 1.0
    gj.narrow(h, 0, 0, 1).mul_(5.0)
    h.sum().backward()
    want = np.array([[5.0] * 3, [1.0] * 3])
    np.testing.assert_array_equal(h.detach().numpy(), want)
    np.testing.assert_array_equal(x.grad.numpy(), want)


def test_clone_and_detach_functions():
    x = gj.tensor(A, requires_grad=True)
    c = gj.clone(x * 2.0)
    assert c.requires_grad and not np.shares_memory(c.detach().numpy(), x.detach().numpy())
    c.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.full_like(A, 2.0))
    d = gj.detach(x)
    assert not d.requires_grad and np.shares_memory(d.numpy(), x.detach().numpy())


@pytest.mark.parametrize("name, args", [("narrow", (0, 0, 1)), ("t", ()), ("select", (1, 0)),
                                        ("transpose", (0, 1)), ("unsqueeze", (0,))])
def test_function_views_against_torch(name, args):
    torch = pytest.importorskip("torch")
    res = []
    for L in (torch, gj):
        x = L.tensor(A.copy(), requires_grad=True)
        h = x * 1.0
        getattr(L, name)(h, *args).mul_(5.0)
        (h * h).sum().backward()
        res.append((h.detach().numpy().copy(), x.grad.numpy().copy()))
    for a, b in zip(*res):
        np.testing.assert_allclose(b, a, rtol=1e-14)
