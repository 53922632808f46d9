"""Gradients that travel: transforms pickle by reference (before and after calls), run in
process pools started by fork and by spawn, share the disk cache (each structure compiled
once), and drive scipy.optimize directly."""
import concurrent.futures as cf
import multiprocessing as mp
import pickle

import numpy as np
import pytest

import gradjit as gj
from tests.runtime import travel_helpers as th


def _data(n=6, k=3, seed=0):
    rng = np.random.default_rng(seed)
    return rng.normal(size=k) / 2, rng.normal(size=(n, k))


@pytest.mark.parametrize("make", [
    lambda: gj.grad(th.loss), lambda: gj.value_and_grad(th.loss, argnums=(0, 1)),
    lambda: gj.jit(th.loss), lambda: gj.jacrev(th.loss), lambda: gj.jacfwd(th.loss),
    lambda: gj.hessian(th.loss), lambda: th.dloss, lambda: th.decorated])
def test_every_transform_pickles_before_and_after_calls(make):
    w, x = _data()
    t = make()
    before = pickle.loads(pickle.dumps(t))
    want = t(w, x)
    again = pickle.loads(pickle.dumps(t))   # (after a call: compiled state never travels)
    for got in (before(w, x), again(w, x)):
        leaves, want_leaves = gj.tree_flatten(got)[0], gj.tree_flatten(want)[0]
        assert len(leaves) == len(want_leaves)
        for a, b in zip(leaves, want_leaves):
            np.testing.assert_allclose(a, b, rtol=1e-12)
    assert type(again) is type(t)


def test_a_decorated_function_pickles_by_name_others_by_their_function():
    assert pickle.loads(pickle.dumps(th.decorated)) is th.decorated
    other = pickle.loads(pickle.dumps(th.dloss))   # (named dloss, wrapping loss)
    assert type(other) is type(th.dloss) and other.fn is th.loss


def test_lambdas_pickle_with_cloudpickle_and_say_why_without():
    w, x = _data()
    t = gj.grad(lambda w, x: (x @ w).sum() ** 2)
    with pytest.raises((pickle.PicklingError, AttributeError), match="lambda"):
        pickle.dumps(t)
    cloudpickle = pytest.importorskip("cloudpickle")
    np.testing.assert_allclose(pickle.loads(cloudpickle.dumps(t))(w, x), t(w, x), rtol=1e-12)


@pytest.mark.slow   # (fresh processes: CI's slow suite runs it)
@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_process_pools_compute_the_same_gradients_compiling_nothing(method):
    if method not in mp.get_all_start_methods():
        pytest.skip(f"no {method} here")
    data = [_data(seed=s) for s in range(6)]
    local = [th.dloss(w, x) for w, x in data]   # (compiled here, into the shared disk cache)
    with cf.ProcessPoolExecutor(2, mp_context=mp.get_context(method),
                                initializer=gj.reset_stats) as ex:
        got = list(ex.map(th.grad_and_compiles, *zip(*data)))
        direct = list(ex.map(th.dloss, *zip(*data)))   # the transform itself, pickled
    for (g, _, _), d, want in zip(got, direct, local):
        np.testing.assert_allclose(g, want, rtol=1e-12)
        np.testing.assert_allclose(d, want, rtol=1e-12)
    compiles = {pid: n for _, pid, n in got}
    assert sum(compiles.values()) == 0   # every worker loaded it from the disk cache


def test_scipy_minimize_takes_value_and_grad_on_a_raveled_pytree():
    optimize = pytest.importorskip("scipy.optimize")

    def rosen(p):
        x = np.concatenate([p["head"], p["tail"]])
        return (100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1.0 - x[:-1]) ** 2).sum()

    params = {"head": np.full(50, -1.2), "tail": np.full(50, 1.0)}
    flat0, unravel = gj.ravel_pytree(params)
    res = optimize.minimize(gj.value_and_grad(lambda flat: rosen(unravel(flat))), flat0,
                            jac=True, method="L-BFGS-B", options={"maxiter": 2000})
    assert res.success and res.fun < 1e-6
    best = unravel(res.x)
    assert np.abs(best["head"] - 1).max() < 1e-2 and np.abs(best["tail"] - 1).max() < 1e-2


@pytest.mark.slow
def test_a_dask_cluster_sweeps_gradients_compiling_each_structure_once(tmp_path, monkeypatch):
    """Two worker processes on a fresh shared cache: a parameter sweep (64 tasks of one
    structure, 8 of another) gives the local results, and each structure is compiled once
    in the whole cluster."""
    distributed = pytest.importorskip("distributed")
    monkeypatch.setenv("GRADJIT_CACHE_DIR", str(tmp_path / "shared"))   # (workers inherit it)
    monkeypatch.delenv("GRADJIT_EXECUTOR", raising=False)
    data = [_data(seed=s) for s in range(64)] + [_data(n=5, k=4, seed=s) for s in range(8)]
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster, \
            distributed.Client(cluster) as client:
        got = client.gather(client.map(th.grad_and_compiles, *zip(*data), pure=False))
    compiles = {}
    for _, pid, n in got:
        compiles[pid] = max(compiles.get(pid, 0), n)
    assert sum(compiles.values()) == 2   # two structures, once each across the cluster
    for (g, _, _), (w, x) in zip(got, data):
        np.testing.assert_allclose(g, th.want(w, x), rtol=1e-12)
