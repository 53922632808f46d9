"""Golden files of generated CPU source, plus structural properties of that source.

Regenerate the goldens with ``GRADJIT_UPDATE_GOLDEN=1 pytest tests/lowering/test_codegen_golden.py``
and review the diff: a regression in readability shows up there.
"""
import ast
import importlib.util
import os
import re

import numpy as np
import pytest

from gradjit.lowering.codegen_cpu import generate
from gradjit.lowering.passes import optimize
from gradjit.runtime.compiler import compile_graph
from gradjit.tracer.interp import interpret
from gradjit.tracer.trace import trace

GOLDEN_DIR = os.path.join(os.path.dirname(__file__), "golden")
UPDATE = os.environ.get("GRADJIT_UPDATE_GOLDEN") == "1"


# -- the graphs ------------------------------------------------------------------------------
def _graph(name, arrays, fn):
    g, tracers, _ = trace(arrays, name=name)
    out = fn(*tracers)
    g.outputs = [o.value for o in (out if isinstance(out, tuple) else (out,))]
    return optimize(g)


def elementwise_chain():
    # (8, 16) * (16,) broadcast, then a chain of elementwise ops: one loop, no temporaries
    return _graph("elementwise_chain", [np.ones((8, 16)), np.ones(16)],
                  lambda x, y: ((x * y + 1.5).tanh() - x) * 0.5)


def reduction():
    # squared difference summed over the last dim: the reduction absorbs its producers
    return _graph("reduction", [np.ones((8, 16)), np.ones((8, 16))],
                  lambda x, y: ((x - y) ** 2).sum(1))


def matmul_broadcast():
    # x @ w + b, relu: BLAS for the product, one fused loop for the bias and relu
    return _graph("matmul_broadcast", [np.ones((4, 8)), np.ones((8, 3)), np.ones(3)],
                  lambda x, w, b: (x @ w + b).relu())


def scalar():
    # 0-d values are plain scalars: no loops, no arrays
    return _graph("scalar", [np.array(1.0), np.array(2.0)],
                  lambda x, y: (x * y).sin() + x)


GRAPHS = {f.__name__: f for f in (elementwise_chain, reduction, matmul_broadcast, scalar)}


def _golden_path(name):
    return os.path.join(GOLDEN_DIR, f"{name}.py")


def _loop_headers(src):
    return [line.strip() for line in src.splitlines() if line.strip().startswith("for ")]


def _load_module(src, tmp_path, name):
    """Import generated source from a file (Numba's cache=True needs one); no compilation."""
    path = tmp_path / f"{name}.py"
    path.write_text(src)
    spec = importlib.util.spec_from_file_location(f"gj_golden_{name}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# -- golden files ------------------------------------------------------------------------------
@pytest.mark.parametrize("name", GRAPHS)
def test_golden_source(name):
    # Helper-module fingerprints (``# gradjit.lowering.fastmath_cpu <sha>``) change with every
    # edit of those modules; the golden files keep a placeholder instead.
    src = re.sub(r"^(# gradjit\.lowering\.\w+) [0-9a-f]{16}$", r"\1 <sha>",
                 generate(GRAPHS[name]()).source, flags=re.M)
    path = _golden_path(name)
    if UPDATE:
        os.makedirs(GOLDEN_DIR, exist_ok=True)
        with open(path, "w") as f:
            f.write(src)
    if not os.path.exists(path):
        pytest.fail(f"missing golden file {path}; run with GRADJIT_UPDATE_GOLDEN=1 to create it")
    with open(path) as f:
        want = f.read()
    assert src == want, (f"generated source for {name!r} changed; if intended, rerun with "
                         f"GRADJIT_UPDATE_GOLDEN=1 and review the diff\n--- got ---\n{src}")


@pytest.mark.parametrize("name", GRAPHS)
def test_generated_source_runs_and_matches_interpreter(name, tmp_path, rng):
    """The source (run as plain Python via ``py_func``, no Numba compile) computes the graph."""
    g = GRAPHS[name]()
    gen = generate(g)
    ast.parse(gen.source)
    mod = _load_module(gen.source, tmp_path, name)
    arrays = [rng.standard_normal(v.shape) for v in g.inputs]
    args = [a[()] if a.ndim == 0 else a for a in arrays]
    got = mod.entry.py_func(*args, gen.consts)
    want = interpret(g, arrays)
    assert len(got) == len(want)
    for a, b in zip(got, want):
        np.testing.assert_allclose(np.asarray(a), b, rtol=1e-12, atol=1e-12)


# -- structural properties ---------------------------------------------------------------------
@pytest.mark.parametrize("name", GRAPHS)
def test_every_module_uses_numpy_error_model_and_comments(name):
    g = GRAPHS[name]()
    src = generate(g).source
    assert 'error_model="numpy"' in src
    assert "cache=" not in src   # (the runtime attaches the verified disk cache: runtime/numba_cache.py)
    assert "def entry(" in src
    # each IR node is named in a comment
    for n in g.nodes:
        assert n.op in src, n.op


def test_fused_chain_is_one_loop_nest_without_temporaries():
    g = elementwise_chain()
    src = generate(g).source
    headers = _loop_headers(src)
    assert len(headers) == 2, src            # one nest over (8, 16)
    assert headers[0].startswith("for i0 ") and headers[1].startswith("for i1 ")
    assert src.count("al.empty(") == 1, src  # only the output is an array
    (out,) = g.outputs
    assert f"v{out.id} = al.empty((np.int64(8), np.int64(16))" in src
    for n in g.nodes:
        v = n.outputs[0]
        if v is not out:
            assert f"v{v.id} =" not in src and f"v{v.id}[" not in src, f"temporary %{v.id}:\n{src}"
    assert "prange" not in src.split("from numba import prange")[1]
    assert "parallel=True" not in src


def test_reduction_absorbs_its_producers():
    g = reduction()
    src = generate(g).source
    headers = _loop_headers(src)
    assert len(headers) == 2, src
    assert "+=" in src
    (out,) = g.outputs
    # the only array allocated is the reduction result; producers live in registers
    allocs = re.findall(r"(v\d+) = al\.(?:empty|full|zeros)\(", src)
    assert allocs == [f"v{out.id}"], src


def test_full_reduction_is_a_scalar_accumulator():
    g = _graph("full_reduction", [np.ones((8, 16))], lambda x: (x * x + 1.0).sum())
    src = generate(g).source
    assert len(_loop_headers(src)) == 2
    assert "al.empty(" not in src and "al.full(" not in src, src
    assert "+=" in src


def test_a_small_sum_beside_vector_math_is_stored_then_summed():
    # a running sum would keep fm.exp scalar: the loop stores the summands in one block
    # (sized to the space, not SPLIT_BLOCK) and al.total sums them after it
    x = np.linspace(-2.0, 2.0, 8 * 16).reshape(8, 16)
    g = _graph("vec_sum", [x], lambda x: x.exp().sum())
    src = generate(g).source
    assert "fm.exp(" in src and "al.total(" in src, src
    assert re.search(r"s\d+ = al\.empty\(shp\d+|s\d+ = al\.empty\(\(np\.int64\(8\)", src), src
    assert "4096" not in src, src
    np.testing.assert_allclose(compile_graph(g)([x])[0], np.exp(x).sum(), rtol=1e-14)


def test_matmul_calls_blas_and_fuses_the_epilogue():
    g = matmul_broadcast()
    src = generate(g).source
    assert src.count("bl.mm(") == 1, src   # BLAS, through the machine-cached helper
    headers = _loop_headers(src)
    assert len(headers) == 2, src            # bias add + relu: one loop nest over (4, 3)
    assert src.count("al.empty(") == 1, src


def test_scalar_graph_has_no_loops_or_arrays():
    src = generate(scalar()).source
    assert _loop_headers(src) == [], src
    assert "empty(" not in src and "full(" not in src
    assert "math.sin(" in src


# -- constants are arguments, not source ---------------------------------------------------------
def _scaled(k, shape=(8, 16)):
    return _graph("scaled", [np.ones(shape)], lambda x: (x * k).exp())


def test_consts_not_baked_into_source():
    a, b = generate(_scaled(2.0)), generate(_scaled(3.0))
    assert a.source == b.source
    assert list(a.consts) == [2.0] and list(b.consts) == [3.0]
    odd = generate(_scaled(2.718281))
    assert "2.718281" not in odd.source
    assert odd.source == a.source


def test_consts_not_baked_even_when_values_coincide():
    """Whether two scalars happen to be equal is a value, not structure: same source."""
    def g(k1, k2):
        return _graph("affine", [np.ones((8, 16))], lambda x: x * k1 + k2)

    distinct, equal = generate(g(2.0, 3.0)), generate(g(2.0, 2.0))
    assert distinct.source == equal.source, (
        f"--- x * 2.0 + 3.0 ---\n{distinct.source}\n--- x * 2.0 + 2.0 ---\n{equal.source}")


def test_consts_feed_the_source(tmp_path):
    g3 = _scaled(3.0, (2, 3))
    gen = generate(g3)
    mod = _load_module(gen.source, tmp_path, "scaled3")
    x = np.arange(6.0).reshape(2, 3)
    (got,) = mod.entry.py_func(x, gen.consts)
    np.testing.assert_allclose(got, np.exp(3.0 * x))
    (got,) = mod.entry.py_func(x, np.array([0.5]))
    np.testing.assert_allclose(got, np.exp(0.5 * x))


# -- parallel loops ------------------------------------------------------------------------------
def test_prange_only_for_large_loops():
    small = generate(_scaled(2.0, (8, 8)))
    large = generate(_scaled(2.0, (1024, 1024)))
    body = large.source.split("from numba import prange", 1)[1]
    assert "prange(1024)" in body
    assert "parallel=True" in large.source and large.parallel
    small_body = small.source.split("from numba import prange", 1)[1]
    assert "prange" not in small_body
    assert "parallel=True" not in small.source and not small.parallel
    # only the outer loop is parallel
    assert [h.split(" in ")[1] for h in _loop_headers(large.source)] == ["prange(1024):",
                                                                        "range(1024):"]


def test_parallel_flag_only_when_some_loop_uses_prange():
    g = _graph("mixed", [np.ones((1024, 1024)), np.ones(8)],
               lambda x, y: ((x * 2.0).exp(), y.sin()))
    src = generate(g).source
    assert "parallel=True" in src
    headers = _loop_headers(src)
    assert sum("prange(" in h for h in headers) == 1
    assert "for i0 in range(8):" in headers


def test_a_large_space_with_leading_size_one_dims_is_parallel(tmp_path):
    # (1, n) and (n,) values share one loop on the CPU (schedule's unit_views); its outer
    # loop is the n one (size-1 dims get no loop), and that one is the parallel one
    n = 1 << 18
    g = _graph("unit", [np.ones((1, n)), np.ones(n)],
               lambda x, y: x.exp().reshape(n) * y + 1.0)
    gen = generate(g)
    headers = _loop_headers(gen.source)
    assert headers == [f"for i1 in prange({n}):"] and gen.parallel
    x, y = np.linspace(-1, 1, n).reshape(1, n), np.linspace(0, 2, n)
    (got,) = _load_module(gen.source, tmp_path, "unit").entry.py_func(x, y, gen.consts)
    np.testing.assert_allclose(got, np.exp(x).reshape(n) * y + 1.0, rtol=1e-15)
