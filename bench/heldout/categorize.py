"""Group the per-test records of a held-out run by cause.

Contract: ``summarize(records)`` takes the JSON lines heldout_plugin.py wrote and returns a
dict (counts, pass rate, groups, per-file table); ``render(summary)`` formats it as text.
Every record gets exactly one category:
  pass     passed, with at least one real-valued check (or no checks at all)
  a        refusal: gradjit raised its own error (unsupported, traced value, ...)
  b        wrong numbers: a gradient check or a test's value assertion failed
  c        crash: any other exception (a non-gradjit error, or one raised inside gradjit
           that is not gradjit's own type)
  d        adapter-excluded: autograd-only API the adapter cannot provide
  complex  passed only because every check was complex and skipped
  skip     skipped for another reason
The pass rate is pass / (all - d - complex): real-valued cases that gradjit is asked to run.
"""
import collections
import re

GRADJIT_REFUSALS = ("GradjitError", "UnsupportedError", "ShapeError", "TracerValueError")
LABELS = {"a": "refusals", "b": "wrong numbers", "c": "crashes",
          "d": "adapter-excluded", "complex": "complex-only (excluded)", "skip": "skipped"}


def _first_line(msg):
    return msg.strip().splitlines()[0] if msg.strip() else ""


def category(r):
    """(category, cause): the cause is the key failures are grouped by."""
    if r["outcome"] == "passed":
        if r.get("checks", 0) == 0 and r.get("complex_skipped", 0) > 0:
            return "complex", "complex-only: every check had a complex input"
        return "pass", ""
    msg, et = r.get("msg", ""), r.get("exc_type", "")
    if "ADAPTER-LIMITATION" in msg:
        return "d", "adapter: " + msg.split(": ", 1)[1][:90]
    if r["outcome"] == "skipped":
        return "skip", msg[:100]
    # autograd.numpy extends NumPy (make_diagonal, linalg._dot): the adapter's plain NumPy lacks them.
    if et.endswith("AttributeError") and re.match(r"module 'numpy(\.linalg)?' has no attribute", msg):
        return "d", ("adapter: autograd-only extension of autograd.numpy, not in NumPy: "
                     + msg.split("module ")[1])
    if "GRADCHECK" in msg:
        m = re.search(r"GRADCHECK (.*?)(?: in| mismatch:|:)", msg)
        return "b", "wrong numbers: GRADCHECK " + (m.group(1) if m else "")
    name = et.split(".")[-1]
    if et.startswith("gradjit") or r.get("raised_in_gradjit"):
        if name in GRADJIT_REFUSALS or (et.startswith("gradjit") and "Error" in name):
            return "a", f"{name}: {_first_line(msg)[:160]}"
        return "c", f"{name} (raised inside gradjit): {_first_line(msg)[:160]}"
    if et.endswith("AssertionError"):
        return "b", "wrong numbers: the test's own assertion failed (not a gradient check)"
    return "c", f"{name}: {_first_line(msg)[:160]}"


def _file(r):
    return r["nodeid"].split("::")[0].split("/")[-1]


def summarize(records):
    counts = collections.Counter()
    groups = collections.defaultdict(list)
    per_file = collections.defaultdict(collections.Counter)
    for r in records:
        c, cause = category(r)
        counts[c] += 1
        per_file[_file(r)][c] += 1
        if c != "pass":
            groups[(c, cause)].append({"test": r["nodeid"], "message": _first_line(r.get("msg", ""))[:300]})
    real = len(records) - counts["d"] - counts["complex"]
    return {
        "run": len(records), "real_valued": real, "passed": counts["pass"],
        "pass_rate": round(counts["pass"] / real, 4) if real else None,
        "counts": {LABELS.get(k, k): v for k, v in sorted(counts.items())},
        "groups": [{"category": LABELS[c], "cause": cause, "count": len(rs), "tests": rs}
                   for (c, cause), rs in sorted(groups.items(), key=lambda kv: (kv[0][0], -len(kv[1])))],
        "per_file": {f: {"passed": c["pass"], "real_valued": sum(c.values()) - c["d"] - c["complex"],
                         **{LABELS[k]: c[k] for k in LABELS if c[k]}}
                     for f, c in sorted(per_file.items())},
    }


def render(s):
    out = [f"PASS RATE over real-valued cases: {s['passed']}/{s['real_valued']}"
           + (f" = {100 * s['pass_rate']:.1f}%" if s["pass_rate"] is not None else ""),
           f"tests run: {s['run']}; by category: "
           + ", ".join(f"{k} {v}" for k, v in s["counts"].items()), ""]
    for g in s["groups"]:
        out.append(f"[{g['category']}] x{g['count']}  {g['cause']}")
        out += [f"      {t['test'].split('::')[-1]} | {t['message'][:160]}" for t in g["tests"]]
    out += ["", "per file (passed/real-valued; failures and exclusions by category):"]
    for f, c in s["per_file"].items():
        rest = ", ".join(f"{k} {v}" for k, v in c.items() if k not in ("passed", "real_valued"))
        out.append(f"  {f:22s} {c['passed']:3d}/{c['real_valued']:3d}   {rest}")
    return "\n".join(out)
