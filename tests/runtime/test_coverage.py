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
