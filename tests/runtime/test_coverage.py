"""``python -m gradjit coverage``: one row per derivatives.yaml entry, with totals."""
import subprocess
import sys

import yaml

from gradjit.lowering import formulas
from gradjit.runtime import coverage


def test_every_entry_has_a_row_and_the_totals_add_up():
    with open(formulas.default_path()) as f:
        n = len(yaml.safe_load(f))
    table = coverage.rows()
    assert len(table) == n
    by = {r.op: r for r in table}
    assert by["mul.Tensor"].cpu and by["mul.Tensor"].tested
    assert by["gather.default"].kind == "kernel" and by["gather.default"].cpu
    assert by["mean.dim"].cpu            # decomposed before code generation
    text = coverage.report(table)
    assert f"total: {n} derivatives.yaml entries" in text
    assert f"CPU code generation {sum(r.cpu for r in table)}/{n}" in text


def test_missing_codegen_and_missing_case_show_up(tmp_path):
    y = tmp_path / "d.yaml"
    y.write_text("- name: mul.Tensor(Tensor self, Tensor other) -> Tensor\n  self: grad\n"
                 "  other: grad\n- name: sum(Tensor self) -> Tensor\n  self: grad\n")
    t = tmp_path / "t.py"
    t.write_text("CASES = {'mul.Tensor': None}\n")
    table = coverage.rows(str(y), str(t))
    assert [(r.op, r.tested) for r in table] == [("mul.Tensor", True), ("sum.default", False)]
    assert coverage.rows(str(y), str(tmp_path / "absent.py"))[0].tested is None
    assert "tested ?/2" in coverage.report(coverage.rows(str(y), str(tmp_path / "absent.py")))


def test_cli():
    out = subprocess.run([sys.executable, "-m", "gradjit", "coverage"], capture_output=True,
                         text=True, check=True).stdout
    assert "slice.Tensor" in out and "total:" in out


def test_composite_section_lists_nn_linalg_and_tensor_composites():
    table = coverage.composite_rows()
    by = {r.op: r for r in table}
    for name in ("gj.nn.functional.cross_entropy", "gj.nn.functional.layer_norm",
                 "gj.linalg.einsum", "gj.linalg.lstsq", "Tensor.var", "Tensor.reshape"):
        assert name in by, name
        assert by[name].via == "decomposes into registered ops" and by[name].tested
    # yaml-backed names (relu, sigmoid, linalg.inv -> linalg_inv) and utilities are not listed
    for name in ("gj.nn.functional.relu", "gj.linalg.inv", "Tensor.exp", "Tensor.backward",
                 "Tensor.numpy"):
        assert name not in by, name
    assert len({r.op for r in table}) == len(table)
    text = coverage.composite_report(table)
    n = len(table)
    assert f"total: {n} composite ops" in text
    assert f"tested {sum(r.tested for r in table)}/{n}" in text


def test_composite_tested_column_searches_the_tests_dir(tmp_path):
    (tmp_path / "t.py").write_text("F.cross_entropy(x, y)\n")
    by = {r.op: r.tested for r in coverage.composite_rows(str(tmp_path))}
    assert by["gj.nn.functional.cross_entropy"] is True
    assert by["gj.linalg.einsum"] is False
    assert all(r.tested is None for r in coverage.composite_rows(str(tmp_path / "absent")))
    assert "tested ?/" in coverage.composite_report(coverage.composite_rows(str(tmp_path / "no")))


def test_cli_prints_the_composite_section():
    out = subprocess.run([sys.executable, "-m", "gradjit", "coverage"], capture_output=True,
                         text=True, check=True).stdout
    assert "composite ops" in out and "gj.nn.functional.cross_entropy" in out
    assert "composite ops; decompose into registered ops" in out
