"""Packaging: derivatives.yaml ships with the package, and a wheel holds every stage.

The three stage folders (tracer/, lowering/, runtime/) and derivatives.yaml
live at the repository root and are mapped into the one import package
``gradjit`` by ``package-dir`` / ``package-data`` in pyproject.toml. These
tests check that the mapping really works: for the installed package, and for
a wheel built from the repository with ``pip wheel``.
"""
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from gradjit.lowering import formulas

ROOT = Path(__file__).resolve().parents[1]
WHEEL_MUST_HOLD = ["gradjit/__init__.py", "gradjit/derivatives.yaml", "gradjit/tracer/ops.py",
                   "gradjit/lowering/adjoint.py", "gradjit/runtime/compiler.py"]
# Build outputs and caches are not part of the source: copying them would let a
# stale build/lib hide a packaging bug.
NOT_SOURCE = shutil.ignore_patterns(".git", "build", "dist", "*.egg-info", "__pycache__",
                                    ".pytest_cache", ".hypothesis", ".benchmarks", "results")


def _pip_wheel_unavailable():
    """Why ``pip wheel --no-build-isolation`` cannot run here, or None if it can."""
    try:
        r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--help"],
                           capture_output=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"pip wheel is not available ({e})"
    if r.returncode != 0:
        return "pip wheel is not available"
    # Without build isolation the build runs in this environment: setuptools < 70.1
    # needs the separate `wheel` package for its bdist_wheel command.
    code = ("try:\n import setuptools.command.bdist_wheel\n"
            "except ImportError:\n import wheel.bdist_wheel")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=120)
    if r.returncode != 0:
        return ("pip wheel --no-build-isolation is not available: this setuptools has no "
                "bdist_wheel (pip install wheel, or setuptools>=70.1)")
    return None


def test_installed_package_finds_derivatives_yaml():
    path = formulas.default_path()
    assert os.path.isfile(path), f"derivatives.yaml not found at {path}"
    entries = formulas.load(path)
    assert "mul.Tensor" in entries and len(entries) >= 10


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    why = _pip_wheel_unavailable()
    if why:
        pytest.skip(why)
    tmp = tmp_path_factory.mktemp("wheel")
    # Build from a clean copy of the repository root (same sources, no stale build/ dir,
    # and nothing written into the working tree).
    src = tmp / "src"
    shutil.copytree(ROOT, src, ignore=NOT_SOURCE)
    out = tmp / "dist"
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                        "-w", str(out), str(src)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, f"pip wheel failed:\n{r.stdout}\n{r.stderr}"
    wheels = list(out.glob("gradjit-*.whl"))
    assert len(wheels) == 1, f"expected one gradjit wheel in {out}: {os.listdir(out)}"
    return wheels[0]


def test_wheel_holds_every_stage_and_the_formulas(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    missing = [n for n in WHEEL_MUST_HOLD if n not in names]
    assert not missing, f"{wheel.name} lacks {missing}; it holds {sorted(names)}"
    assert not any(n.split("/")[0] in ("tracer", "lowering", "runtime") for n in names), \
        "stage folders must be inside gradjit/, not top-level packages"


@pytest.mark.slow   # (fresh processes: CI's slow suite runs it)
def test_unpacked_wheel_loads_its_own_formulas(wheel, tmp_path):
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    code = ("import gradjit, gradjit.lowering.formulas as f; p = f.default_path(); "
            "print(gradjit.__file__); print(p); print(len(f.load(p)))")
    env = {**os.environ, "PYTHONPATH": str(site)}
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    pkg, path, n = r.stdout.split()
    assert pkg.startswith(str(site)), f"imported {pkg}, not the unpacked wheel"
    assert path == str(site / "gradjit" / "derivatives.yaml") and int(n) >= 10
