"""README.md is tested: its set-up commands, and every ```python block.

The python blocks run in order in one namespace, as a reader pasting them into
one session would run them. GRADJIT_* environment variables a block sets are
restored afterwards.
"""
import os
import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
FENCE = re.compile(r"^```([\w+-]*)[^\n]*\n(.*?)^```[ \t]*$", re.S | re.M)

DEMO = 'pip install -e ".[test]" && python -m gradjit demo'
TESTS = 'pip install -e ".[test,cuda]" && python -m pytest -q && python -m pytest -q -m slow'


def blocks():
    return [(m.group(1), m.group(2), README.read_text()[:m.start()].count("\n") + 1)
            for m in FENCE.finditer(README.read_text())]


def test_first_code_block_holds_exactly_the_two_setup_commands():
    text = README.read_text()
    first = FENCE.search(text)
    assert first is not None, "README.md has no code block"
    assert not text[:first.start()].strip().replace("# gradjit", "").strip(), \
        "README.md must open with the set-up commands"
    lines = [ln.strip() for ln in first.group(2).splitlines() if ln.strip()]
    assert lines == [DEMO, TESTS]


def test_ci_runs_the_readme_test_command():
    ci = (README.parent / ".ci" / "run").read_text()
    assert TESTS in ci


def test_python_blocks_run_in_order(monkeypatch):
    code = [(src, line) for lang, src, line in blocks() if lang == "python"]
    assert len(code) >= 4, "expected the API tour in ```python blocks"
    for key in [k for k in os.environ if k.startswith("GRADJIT_") and k != "GRADJIT_CACHE_DIR"]:
        monkeypatch.delenv(key)
    saved = {k: v for k, v in os.environ.items() if k.startswith("GRADJIT_")}
    namespace = {"__name__": "readme"}
    try:
        for src, line in code:
            try:
                # Pad with newlines so tracebacks show README.md's own line numbers.
                exec(compile("\n" * line + src, str(README), "exec"), namespace)
            except Exception as e:  # point at the block, keep the traceback
                pytest.fail(f"README.md python block at line {line} failed: "
                            f"{type(e).__name__}: {e}\n---\n{src}")
    finally:
        for k in [k for k in os.environ if k.startswith("GRADJIT_")]:
            if k not in saved:
                del os.environ[k]
        os.environ.update(saved)


def test_readme_lists_every_traced_numpy_function():
    """The README's list of NumPy functions that trace is the dispatch table's list."""
    import re

    from gradjit.tracer import numpy_protocol
    text = open(README).read()
    start = text.index("<!-- numpy-supported")
    section = text[start:text.index("\n\n", text.index("`np.linalg`", start))]
    listed = set(re.findall(r"`([a-z_0-9]+)`", section))
    scipy = {"erf", "erfc", "erfinv", "gammaln", "psi", "expit", "logit", "xlogy"}
    table = set(numpy_protocol._NAMES)
    # scipy.special's traced functions, listed in the sentence before the section
    from gradjit.tracer.scipy_functions import SCIPY_FUNCTIONS
    sentence = text[text.rindex("`scipy.special`'s", 0, start):start]
    named = set(re.findall(r"`([a-z_0-9]+)`", sentence))
    assert scipy | {name for _, name, _ in SCIPY_FUNCTIONS} <= named, "scipy.special list"
    assert table - listed - scipy == set(), "traced but not in the README"
    assert listed - table == set(), "in the README but not traced"
