"""Loop rolling: an unrolled Python loop compiles as one ``for`` loop over its step.

Counters, not clocks: the generated entry's size does not grow with the number of
unrolled steps, each rolled body appears once, a gradient compiles once, and rolled
code computes what the NumPy reference interpreter computes (forward and adjoint
loops, carries, per-step inputs, per-step constants, accumulated losses, float32).
"""
import re

import numpy as np
import pytest

import gradjit as gj
from gradjit.lowering.codegen_cpu import generate
from gradjit.lowering.passes import optimize

pytestmark = pytest.mark.slow   # (pyproject.toml: the default run skips it; CI runs it)


def _rnn_args(T, hidden=5, inp=3, seed=0, dtype=np.float64):
    rng = np.random.default_rng(seed)
    ws = [rng.standard_normal((inp, hidden)) / 2, rng.standard_normal((hidden, hidden)) / 3,
          0.1 * rng.standard_normal(hidden), 0.1 * rng.standard_normal((1, hidden))]
    xs = [rng.standard_normal((1, inp)) for _ in range(T)]
    return [a.astype(dtype) for a in ws + xs]


def rnn_args_loss(Wx, Wh, b, h, *xs):
    for x in xs:   # a Python loop: unrolled by tracing
        h = np.tanh(x @ Wx + h @ Wh + b)
    return (h * h).sum()


def rnn_stacked_loss(Wx, Wh, b, h, X):
    for t in range(X.shape[0]):   # per-step slices of one array: literal indices vary
        h = np.tanh(X[t] @ Wx + h @ Wh + b)
    return (h * h).sum()


def rnn_running_loss(Wx, Wh, b, h, *xs):
    loss = 0.0
    for t, x in enumerate(xs):   # a scalar carry, and a constant that changes per step
        h = np.tanh(x @ Wx + h @ Wh + b) * (1.0 + 0.01 * t)
        loss = loss + (h * h).sum()
    return loss


def rnn_two_layer_loss(Wx, Wh, b, h, *xs):
    g = h
    for x in xs:
        u = np.sin(x)   # a value of its own per step, computed before it is used
        h = np.tanh(u @ Wx + h @ Wh + b)
        g = np.tanh(h @ Wh + g @ Wh.T - b)
    return (g * h).mean()


def _source(loss, args, argnums=(0, 1, 2)):
    f = gj.grad(loss, argnums=argnums)
    g, call_args, arg_values = f._trace(args)
    f._trace_body(g, call_args, arg_values)
    return generate(optimize(g), pack_inputs=True).source


def _entry_lines(src):
    body = src[src.index("def entry"):]
    return [ln for ln in body.splitlines() if ln.strip() and not ln.strip().startswith("#")]


def _shape_free(lines):
    """Entry lines with ids, literals and step counts blanked: the structure alone."""
    return [re.sub(r"\d+", "#", ln.split("  # ")[0]) for ln in lines]


def _check(loss, args, argnums=(0, 1, 2), monkeypatch=None, rtol=1e-12):
    got = gj.grad(loss, argnums=argnums)(*args)
    monkeypatch.setenv("GRADJIT_EXECUTOR", "numpy")
    want = gj.grad(loss, argnums=argnums)(*args)
    monkeypatch.delenv("GRADJIT_EXECUTOR")
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=rtol, atol=rtol * 1e-2)


def test_entry_size_does_not_grow_with_steps():
    src30 = _source(rnn_args_loss, _rnn_args(30))
    src100 = _source(rnn_args_loss, _rnn_args(100))
    assert src100.count("# rolled:") == 2   # the forward loop and the adjoint loop
    assert _shape_free(_entry_lines(src30)) == _shape_free(_entry_lines(src100))
    assert len(_entry_lines(src100)) < 200
    assert "def loop" not in src100   # nothing left for the outliner
    # The 100 per-step inputs arrive as one packed argument, not 100 arguments.
    assert re.search(r"def entry\(v0, v1, v2, v3, v\d+, P0, consts\)", src100)


def test_rolled_gradient_compiles_once_and_matches_interpreter(monkeypatch):
    args = _rnn_args(40, hidden=7)   # shapes no other test compiles
    gj.reset_stats()
    f = gj.grad(rnn_args_loss, argnums=(0, 1, 2))
    f(*args)
    f(*_rnn_args(40, hidden=7, seed=1))
    st = gj.stats()
    assert st["compiles"] + st["disk_hits"] == 1 and st["memory_hits"] == 0
    _check(rnn_args_loss, args, monkeypatch=monkeypatch)


@pytest.mark.parametrize("loss, make", [
    (rnn_stacked_loss, lambda: _rnn_args(1)[:4] + [np.random.default_rng(3).standard_normal((36, 1, 3))]),
    (rnn_running_loss, lambda: _rnn_args(36)),
    (rnn_two_layer_loss, lambda: _rnn_args(36)),
])
def test_rolled_variants_match_interpreter(loss, make, monkeypatch):
    args = make()
    assert "# rolled:" in _source(loss, args)
    _check(loss, args, monkeypatch=monkeypatch)


def test_rolled_gradient_wrt_per_step_inputs(monkeypatch):
    args = _rnn_args(36)
    src = _source(rnn_args_loss, args, argnums=tuple(range(len(args))))
    assert "# rolled:" in src
    _check(rnn_args_loss, args, argnums=tuple(range(len(args))), monkeypatch=monkeypatch)
    X = np.random.default_rng(4).standard_normal((36, 1, 3))
    _check(rnn_stacked_loss, args[:4] + [X], argnums=(0, 1, 4), monkeypatch=monkeypatch)


def test_a_partial_last_step_joins_the_rolled_loop(monkeypatch):
    # The adjoint's step at t=1 lacks what only an earlier step reads (dh0, h0 not being
    # differentiated): it runs as one more iteration of the rolled loop, its missing lines
    # unused, reading h0 where the forward stack has no entry.
    args = _rnn_args(40)
    src = _source(rnn_args_loss, args, (0, 1, 2))
    assert src.count("the last one partial") == 1
    assert re.search(r"= S\d+_\d+\[.*\] if it\d+ < \d+ else v3\n", src)   # h0: the carry start
    assert not re.search(r"\bm(in|ax)\(", src)
    tail = src[src.rindex("    for it"):]
    tail = tail[tail.index("\n    C") if "\n    C" in tail else 0:]
    assert "for " not in tail.split("\n    v", 1)[-1]   # nothing of the step after the loop
    _check(rnn_args_loss, args, argnums=(0, 1, 2), monkeypatch=monkeypatch)


def test_a_last_step_reading_the_first_inputs_by_name_stays_one_step(monkeypatch):
    # With h0 differentiated the adjoint's last step is whole, but it reads h0 and x0 by
    # name: it is written out after the loop, one step whatever the trip count.
    srcs = [_source(rnn_args_loss, _rnn_args(T), (0, 1, 2, 3)) for T in (40, 60)]
    assert len(srcs[0].splitlines()) == len(srcs[1].splitlines())
    _check(rnn_args_loss, _rnn_args(40), argnums=(0, 1, 2, 3), monkeypatch=monkeypatch)


def test_match_tail_renames_consistently():
    from gradjit.lowering.codegen_cpu_roll_text import match_tail
    body = ["    v5 = bl.mm(v1, v2)  # %5:f[1,3] = mm.default(%1, %2)",
            "    # loop over (1, 3)",
            "    for i1 in range(3):",
            "        t6 = v5[0, i1] * c0  # %6:f[1,3] = mul.Scalar(%5)",
            "        v7[0, i1] = t6 + v8[0, i1]  # %7:f[1,3] = add.Tensor(%6, %8)"]
    tail = ["    for i1 in range(3):",
            "        t16 = v15[0, i1] * c4  # %16:f[1,3] = mul.Scalar(%15)",
            "        v17[0, i1] = t16 + v18[0, i1]  # %17:f[1,3] = add.Tensor(%16, %18)"]
    ids, slots, lits = match_tail(body, tail)
    assert ids == [15, None, None, 16, 17, 18] and slots == [4]   # v5, v1, v2, t6, v7, v8
    assert lits == [3, 0, 0, 0]
    assert match_tail(body, tail[::-1]) is None                    # out of order
    bad = tail[:2] + ["        v17[0, i1] = t16 + v15[0, i1]  # %17:f[1,3] = add.Tensor(%16, %15)"]
    assert match_tail(body, bad) is None      # v15 cannot stand for both %5 and %8
    other = tail[:2] + ["        v17[0, i1] = t16 - v18[0, i1]  # %17:f[1,3] = sub.Tensor(%16, %18)"]
    assert match_tail(body, other) is None


def test_iteration_keys_agree_with_the_joined_code():
    # An iteration's key is composed from its blocks' canonical forms (each canonicalised
    # once); it must be equal between two iterations exactly when their joined code's
    # canonical texts are: here the third iteration's product reads the second's matmul,
    # not its own, so each block's text is the same but the iteration differs.
    from gradjit.lowering.codegen_cpu_roll import Block, _Roller
    from gradjit.lowering.codegen_cpu_roll_text import canon

    def blocks(cross):
        out = []
        for k in range(4):
            a, b, x = 10 * k + 11, 10 * k + 12, 10 * k + 13
            src = a - 10 if cross and k == 2 else a
            out += [Block([f"    v{a} = bl.mm(v{x}, v1)  # %{a}:f[1,3] = mm.default(%{x}, %1)"], {a}),
                    Block([f"    v{b} = v{src} * v{src} + c{k}"], {b})]
        return out
    for cross in (False, True):
        bl = blocks(cross)
        its = _Roller(bl, {}, set(), {}, [], (), False)._iters(0, 2, 4)
        joined = [canon(bl[2 * k].lines + bl[2 * k + 1].lines) for k in range(4)]
        for i in range(4):
            for j in range(4):
                assert (its[i].text == its[j].text) == (joined[i][0] == joined[j][0]), (cross, i, j)
            assert (its[i].ids, its[i].slots, its[i].lits) == tuple(joined[i][1:4])
        assert (its[2].text == its[0].text) != cross


def test_rolled_float32(monkeypatch):
    args = _rnn_args(36, dtype=np.float32)
    assert "# rolled:" in _source(rnn_running_loss, args)
    _check(rnn_running_loss, args, monkeypatch=monkeypatch, rtol=2e-4)


def test_rolled_value_and_jit(monkeypatch):
    args = _rnn_args(36)
    v, g = gj.value_and_grad(rnn_args_loss, argnums=(1,))(*args)
    np.testing.assert_allclose(v, rnn_args_loss(*args), rtol=1e-12)
    np.testing.assert_allclose(gj.jit(rnn_args_loss)(*args), rnn_args_loss(*args), rtol=1e-12)


def test_rolled_batched_jacobian():
    # Batched entries keep every input an argument (no packs): the rolled loop reads a tuple.
    args = _rnn_args(36, hidden=3)
    J = gj.jacrev(lambda b: rnn_args_loss(args[0], args[1], b, *args[3:]))(args[2])
    eps = 1e-6
    fd = [(rnn_args_loss(args[0], args[1], args[2] + eps * e, *args[3:])
           - rnn_args_loss(args[0], args[1], args[2] - eps * e, *args[3:])) / (2 * eps)
          for e in np.eye(3)]
    np.testing.assert_allclose(J, fd, rtol=1e-6, atol=1e-9)


def test_rolled_tensor_mode_backward(monkeypatch):
    args = _rnn_args(36)
    ts = [gj.tensor(a, requires_grad=i < 3) for i, a in enumerate(args)]
    rnn_running_loss(*ts).backward()
    monkeypatch.setenv("GRADJIT_EXECUTOR", "numpy")
    ts2 = [gj.tensor(a, requires_grad=i < 3) for i, a in enumerate(args)]
    rnn_running_loss(*ts2).backward()
    for a, b in zip(ts[:3], ts2[:3]):
        np.testing.assert_allclose(np.asarray(a.grad), np.asarray(b.grad), rtol=1e-12)


def test_unrollable_steps_fall_back_to_outlining(monkeypatch):
    # Step t reads X[perm[t]]: the index is not affine in t, so the forward steps do not
    # roll and the outliner shares one function per distinct fused loop among them; the
    # adjoint steps (no slicing: X needs no gradient) still roll, reading the forward's
    # values through a tuple.
    perm = [int(p) for p in np.random.default_rng(6).permutation(30)]

    def loss(Wx, Wh, b, h, X):
        for t in range(30):
            h = np.tanh(X[perm[t]] @ Wx + h @ Wh + b)
        return (h * h).sum()
    args = _rnn_args(1)[:4] + [np.random.default_rng(5).standard_normal((30, 1, 3))]
    src = _source(loss, args)
    assert src.count("# rolled:") == 1 and "def loop" in src
    _check(loss, args, monkeypatch=monkeypatch)


def test_rolled_loop_reads_earlier_values_through_a_tuple(monkeypatch):
    # X[(t * t) % 7] repeats rows: tracing shares the slices (CSE), so the rolled steps
    # read values computed before the loop, in no affine order: a tuple of them.
    def loss(Wx, Wh, b, h, X):
        for t in range(30):
            h = np.tanh(X[(t * t) % 7] @ Wx + h @ Wh + b)
        return (h * h).sum()
    args = _rnn_args(1)[:4] + [np.random.default_rng(5).standard_normal((7, 1, 3))]
    src = _source(loss, args)
    assert "# rolled:" in src and re.search(r"X\d+_\d+ = \(", src)
    _check(loss, args, monkeypatch=monkeypatch)
    _check(loss, args, argnums=(0, 4), monkeypatch=monkeypatch)


# -- corner cases found in review: each one compiled wrongly or not at all before --------------
def _same_as_numpy(f, *args):
    np.testing.assert_allclose(gj.jit(f)(*args), f(*args), rtol=1e-12)


def test_stored_value_read_by_name_in_a_later_loop():
    rng = np.random.default_rng(7)
    W = rng.standard_normal((4, 4)) / 3
    xs = [rng.standard_normal((1, 4)) for _ in range(20)]

    def as_invariant(W, *xs):
        h, hs = np.zeros((1, 4)) + 0.1, []
        for x in xs:
            h = np.tanh(h @ W + x)
            hs.append(h)
        g = h
        for x in xs:
            g = np.sin(g @ W + hs[3])   # the same stored value in every step
        return (g * g).sum() + (h * h).sum()

    def as_carry_start(W, *xs):
        h, hs = np.zeros((1, 4)) + 0.1, []
        for x in xs:
            h = np.tanh(h @ W + x)
            hs.append(h)
        g = hs[3]                       # a stored value starts the second loop's carry
        for x in xs:
            g = np.sin(g @ W.T + x)
        return (g * g).sum() + (h * h).sum()
    _same_as_numpy(as_invariant, W, *xs)
    _same_as_numpy(as_carry_start, W, *xs)


def test_carry_start_of_another_type():
    rng = np.random.default_rng(8)
    xs = [rng.standard_normal((1, 4)) for _ in range(20)]

    def dtype_changes(W, h, *xs):   # float32 start, float64 steps
        for x in xs:
            h = np.tanh(h + x @ W)
        return (h * h).sum()

    def ndim_changes(W, h, *xs):    # (4,) start, (1, 4) steps
        for x in xs:
            h = np.tanh((h.reshape(2, 2) @ W).reshape(1, 4) + x)
        return (h * h).sum()
    _same_as_numpy(dtype_changes, rng.standard_normal((4, 4)) / 3,
                   rng.standard_normal((1, 4)).astype(np.float32), *xs)
    _same_as_numpy(ndim_changes, rng.standard_normal((2, 2)) / 2, rng.standard_normal(4), *xs)


def test_constant_slot_type_changes_with_the_step():
    rng = np.random.default_rng(9)

    def f(W, h, s, *xs):
        for x in xs:
            h = np.tanh(h @ W)
            s = (x + h.sum() * 1e-30) + (s == 0.1) * 1.0   # s is float32 at first only
        return s
    args = [rng.standard_normal((4, 4)) / 3, rng.standard_normal((1, 4)) / 3,
            np.asarray(np.float32(0.0))] + [np.asarray(0.1)] * 25
    _same_as_numpy(f, *args)


def test_per_step_values_of_mixed_layouts_through_a_tuple():
    rng = np.random.default_rng(10)
    pat = [0, 1, 1, 0, 0, 1, 0, 1, 1, 0, 0, 1, 1, 1, 0, 0, 1, 0, 0, 1, 1, 0, 1, 0]

    def f(W, *Ms):   # LAPACK results (F-ordered) and products (C) feed one loop
        As = [np.linalg.inv(M) if p else M @ M for p, M in zip(pat, Ms)]
        h = np.zeros((1, 4)) + 0.1
        for A in As:
            h = np.tanh(h @ W @ A)
        return (h * h).sum()
    Ms = [np.eye(4) * 2 + 0.1 * rng.standard_normal((4, 4)) for _ in pat]
    _same_as_numpy(f, rng.standard_normal((4, 4)) / 3, *Ms)


def test_packed_call_with_read_only_and_wrong_shaped_arguments():
    args = _rnn_args(30)
    g = gj.grad(rnn_args_loss, argnums=(0, 1, 2))
    want = g(*args)
    ro = [a.copy() for a in args]
    for a in ro:
        a.setflags(write=False)
    for a, b in zip(g(*ro), want):
        np.testing.assert_allclose(a, b, rtol=1e-12)
    # Same sizes, other shapes for the per-step inputs: a new signature, not a silent reshape.
    flat = args[:4] + [x.reshape(3, 1) for x in args[4:]]
    with pytest.raises(Exception):
        g(*flat)   # (3, 1) @ (3, 5) does not multiply: traced anew, the shape error is raised
    for a, b in zip(g(*args), want):
        np.testing.assert_allclose(a, b, rtol=1e-12)


def test_big_loops_of_a_rolled_body_are_outlined(monkeypatch):
    # hidden 16: the weight-gradient loops have 16 * 16 = OUTLINE_BIG elements (loops, not
    # the cached rank-1 helpers they would call: codegen_cpu_outer.py)
    from gradjit.lowering import codegen_cpu
    monkeypatch.setattr(codegen_cpu, "RANK_ONE", False)
    rng = np.random.default_rng(3)
    H = 16
    assert H * H >= codegen_cpu.OUTLINE_BIG
    args = [rng.standard_normal((3, H)) / 2, rng.standard_normal((H, H)) / 5,
            0.1 * rng.standard_normal(H), np.zeros((1, H))]
    args += [rng.standard_normal((1, 3)) for _ in range(40)]

    def loss(Wx, Wh, b, h, *xs):
        for x in xs:
            h = np.tanh(x @ Wx + h @ Wh + b)
        return (h * h).sum()
    f = gj.grad(loss, argnums=(0, 1, 2))
    g, call_args, arg_values = f._trace(args)
    f._trace_body(g, call_args, arg_values)
    src = generate(optimize(g)).source
    assert "# rolled:" in src and 0 < src.count("\ndef loop") <= 6
    body = src.split("# rolled:")[2]   # the backward's rolled loop calls them
    assert " = loop" in body
    # dWh's first term (before the rolled loop) is the adding loop the rolled body calls,
    # given zeros: one outer-product function, not two (dWx's, 3 x 16, stay inline).
    first = [ln for ln in src.split("\n") if "al.zeros(" in ln]
    assert len(first) == 1 and src.count("\ndef loop") == 1
    assert re.search(r"= (loop\d+)\(", first[0]).group(1) in body
    got = f(*args)
    monkeypatch.setenv("GRADJIT_EXECUTOR", "numpy")
    want = gj.grad(loss, argnums=(0, 1, 2))(*args)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)


def test_outlined_loops_differing_only_in_shape_share_a_function(monkeypatch):
    # Wx (24, 16) and Wh (16, 16): their gradients' outer-product loops are one text once
    # the extents are read from the arguments' shapes, so one function serves both (loops,
    # not the cached rank-1 helpers they would call: codegen_cpu_outer.py). With Wx
    # (16, 16) too, both products are one space and fuse into one pass: other functions,
    # as few, each called every step.
    from gradjit.lowering import codegen_cpu
    monkeypatch.setattr(codegen_cpu, "RANK_ONE", False)

    def source(inp):
        args = _rnn_args(40, hidden=16, inp=inp, seed=4)
        return _source(rnn_args_loss, args), args
    same, _ = source(16)
    diff, args = source(24)
    assert "# rolled:" in diff and "n0 = v" in diff
    assert diff.count("\ndef loop") == 1
    assert diff.count("\ndef loop") < len(re.findall(r"= loop\d+\(", diff))
    assert "# rolled:" in same and 0 < same.count("\ndef loop") <= 3
    _check(rnn_args_loss, args, monkeypatch=monkeypatch)


def test_views_reshape_through_the_cached_helper_or_an_index():
    # ndarray.reshape would make Numba compile its (uncached) normalize_reshape_value
    # subroutine in every process; al.reshape is compiled once per machine, and a view that
    # only drops or adds size-1 dims is an index (unit_dims_view), cheaper still
    src = _source(rnn_args_loss, _rnn_args(40))
    assert ".reshape(" not in src.replace("al.reshape(", "")
    # the RNN's h.T, a (1, 5) -> (5, 1) view read only by the outer products, is not built
    # at all: they read h (codegen_cpu_fold), here in the cached rank-1 helpers
    assert not re.search(r"# %\d+:float64\[5,1\] = t\.default", src)
    assert re.search(r"= bl\.ger\(v\d+_?, v\d+_?, C\d+_\d+\)", src), src


def test_unit_dims_views_are_indexes_and_agree_with_numpy(rng):
    from gradjit.lowering.codegen_cpu_stmt import unit_dims_view as u
    assert u(3, (1, 5), (5,)) == "v3[0]"
    assert u(3, (1, 5), (5, 1)) == "v3[0][:, None]"
    assert u(3, (5,), (1, 5)) == "v3[None, :]"
    assert u(3, (1, 1, 4, 5), (4, 5)) == "v3[0, 0]"
    assert u(3, (1, 1, 5), (1, 5, 1)) == "v3[0, 0][None, :, None]"
    for src, dst in (((5, 1), (5,)), ((1, 1), (1,)), ((1, 5), (5, 2)), ((2, 3), (3, 2)),
                     ((1, 2, 3), (3, 2)), ((2, 3, 6), (2, 1, 3, 6)), ((1, 4, 5), (4, 1, 5))):
        assert u(3, src, dst) is None   # a size-1 dim after others, none kept, or a reshape
    # every kind of unit-dim view, compiled, against NumPy (values and gradients)
    x = rng.normal(size=(1, 4))
    y = rng.normal(size=(4,))

    def f(x, y):
        a = x.reshape(4) * y                    # (1, 4) -> (4,)
        b = x.T @ y.reshape(1, 4)               # (1, 4) -> (4, 1), (4,) -> (1, 4)
        c = np.tanh(x.reshape(1, 1, 4)) * x.reshape(4, 1, 1)   # adds dims / a (4, 1) row
        d = x.reshape(2, 2) * y.reshape(2, 2)   # a real reshape: al.reshape
        return a.sum() + (b * b).sum() + c.sum() + (d ** 3).sum()
    src = gj.grad(f, argnums=(0, 1)).graphs(x, y)[2]
    assert "[0][:, None]" in src and "al.reshape(" in src
    g = gj.grad(f, argnums=(0, 1))(x, y)
    eps = 1e-6
    for k, v in enumerate((x, y)):
        num = np.zeros(v.size)
        for i in range(v.size):
            d = np.zeros(v.size)
            d[i] = eps
            args = [x, y]
            args[k] = v + d.reshape(v.shape)
            hi = f(*args)
            args[k] = v - d.reshape(v.shape)
            num[i] = (hi - f(*args)) / (2 * eps)
        np.testing.assert_allclose(g[k].ravel(), num, rtol=1e-6, atol=1e-8)


def test_size_one_dims_get_no_loop(monkeypatch):
    # the RNN's per-step loops are over (1, hidden): the 1 is an index, not a loop
    args = _rnn_args(40)
    src = _source(rnn_args_loss, args)
    assert "# loop over (1, 5)" in src and "in range(1)" not in src
    assert re.search(r"\[0, i1\]", src)
    _check(rnn_args_loss, args, monkeypatch=monkeypatch)


def test_helpers_compile_once_per_rank_not_per_shape(monkeypatch):
    # Numba types a constant tuple such as (1, 5) as literals and would compile (and cache)
    # al.empty once per shape; shapes are written as np.int64(k), one compile per rank
    src = _source(rnn_args_loss, _rnn_args(40))
    lines = [ln.split("  #")[0] for ln in src.splitlines()
             if re.search(r"al\.(empty|full|zeros|reshape)\(", ln)]
    assert lines and all(re.search(r"np\.int64\(|\(n0|\bshp\d+\b", ln) for ln in lines)
    assert not any(re.search(r"\(\d+,", re.sub(r"np\.int64\(\d+\)", "k", ln)) for ln in lines)
    # ... and a literal shape the entry spells more than once is one local (hoist_shapes)
    decls = re.findall(r"^    (shp\d+) = (\(np\.int64\(\d+\).*\))$", src, re.M)
    entry = src[src.index("def entry"):]
    assert decls and all(entry.count(t) == 1 and len(re.findall(rf"\b{n}\b", entry)) > 2
                         for n, t in decls)
    from gradjit.lowering import alloc_cpu as al
    for hidden in (5, 7):
        _check(rnn_args_loss, _rnn_args(12, hidden=hidden), monkeypatch=monkeypatch)
    shapes = [s[0] for f in (al.empty, al.full) for s in f.signatures] + [
        s[1] for s in al.reshape.signatures]
    assert shapes and not any("Literal" in str(s) for s in shapes)


def test_hoist_shapes_names_repeated_literal_shapes_only():
    from gradjit.lowering.alloc_cpu import hoist_shapes, shape_arg
    a, b = shape_arg((1, 32)), shape_arg((32,))
    lines = [f"    x = al.empty({a}, np.float64)  # {a} in a comment stays",
             f"    y = al.full({a}, 0.0, np.float64)",
             f"    z = al.reshape(x, {b})", "    w = al.reshape(y, (n0, np.int64(2)))"]
    decls, out = hoist_shapes(lines)
    assert decls == [f"    shp0 = {a}"]
    assert out == [f"    x = al.empty(shp0, np.float64)  # {a} in a comment stays",
                   "    y = al.full(shp0, 0.0, np.float64)", lines[2], lines[3]]
    assert hoist_shapes(lines[2:]) == ([], lines[2:])
