"""The generated-source cache (runtime/plans.py): hits return exactly what generation
would, and everything the text depends on is part of the key. Counters, not clocks."""
import json
import os

import numpy as np
import pytest

from gradjit.lowering import codegen_cpu
from gradjit.lowering.passes import optimize
from gradjit.runtime import plans
from gradjit.tracer import cache_store
from gradjit.tracer.ir import Graph


def _graph(scale=2.0, n=5):
    g = Graph("plan_test")
    x = g.add_input((n,), np.float64)
    y = g.add_node("mul.Scalar", [x], {"other": scale}, [((n,), np.dtype(np.float64))])[0]
    z = g.add_node("tanh.default", [y], {}, [((n,), np.dtype(np.float64))])[0]
    g.outputs = [g.add_node("sum.default", [z], {}, [((), np.dtype(np.float64))])[0]]
    return optimize(g)


@pytest.fixture
def counted(monkeypatch):
    calls = []
    real = plans.generate

    def spy(graph, name="entry", pack_inputs=False):
        calls.append(graph.name)
        return real(graph, name, pack_inputs=pack_inputs)
    monkeypatch.setattr(plans, "generate", spy)
    return calls


@pytest.fixture
def store(tmp_path):
    return cache_store.open_dir(str(tmp_path))


def _same(a, b):
    assert a.source == b.source and a.parallel == b.parallel and a.packs == b.packs
    np.testing.assert_array_equal(a.consts, b.consts)
    assert [c.hex() for c in a.consts] == [c.hex() for c in b.consts]


def test_second_request_reads_the_disk_and_equals_generation(store, counted):
    first = plans.generated(_graph(-0.0), "entry", True, store)
    again = plans.generated(_graph(-0.0), "entry", True, store)
    assert len(counted) == 1
    _same(first, again)
    _same(again, codegen_cpu.generate(_graph(-0.0), "entry", pack_inputs=True))


def test_everything_the_text_depends_on_is_in_the_key(store, counted, monkeypatch):
    d = store
    plans.generated(_graph(2.0), "entry", True, d)
    plans.generated(_graph(3.0), "entry", True, d)     # another attribute value
    plans.generated(_graph(-0.0), "entry", True, d)
    plans.generated(_graph(0.0), "entry", True, d)     # signed zero differs
    plans.generated(_graph(2.0, n=6), "entry", True, d)  # another shape
    plans.generated(_graph(2.0), "other", True, d)     # another entry name
    plans.generated(_graph(2.0), "entry", False, d)    # packing off
    monkeypatch.setenv("GRADJIT_FAST_MATH", "0")
    plans.generated(_graph(2.0), "entry", True, d)
    assert len(counted) == 8
    monkeypatch.setattr(plans, "_CODE", ["another version of the code generator"])
    plans.generated(_graph(2.0), "entry", True, d)
    assert len(counted) == 9


@pytest.mark.parametrize("damage", ["truncated", "planted"])
def test_unreadable_or_planted_plan_is_a_miss_and_is_not_trusted(tmp_path, store, counted,
                                                                 damage, caplog):
    good = plans.generated(_graph(), "entry", True, store)
    folder = os.path.join(str(tmp_path), "plans")
    (path,) = [os.path.join(folder, f) for f in os.listdir(folder)]
    with open(path, "w") as f:   # (valid JSON, another program: what a planted plan is)
        f.write('{"source": "trunc' if damage == "truncated" else
                json.dumps({"source": "raise SystemExit(3)\n", "consts": [], "parallel": False,
                            "packs": []}))
    again = plans.generated(_graph(), "entry", True, store)
    assert len(counted) == 2 and path in caplog.text   # (one warning names the file)
    _same(good, again)
    plans.generated(_graph(), "entry", True, store)   # the file was replaced: a hit again
    assert len(counted) == 2


def test_opaque_attributes_are_not_cached(tmp_path, counted):
    g = _graph()
    g.nodes[0].attrs = dict(g.nodes[0].attrs, marker=object())   # no faithful text form
    assert plans._key(g, "entry", True) is None
