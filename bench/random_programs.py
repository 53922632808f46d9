"""Random-program differential test of gradjit against NumPy and finite differences.

    python bench/random_programs.py --n 2000                # interpreter (GRADJIT_EXECUTOR=numpy)
    python bench/random_programs.py --long                  # 10,000 programs
    python bench/random_programs.py --n 50 --compiled       # compiled (Numba) executor
    python bench/random_programs.py --n 500 --seed 7 --all  # include the KNOWN_BUGS features
    python bench/random_programs.py --one 1234              # show program 1234 and its outcome

Each program (tests/random_programs/generator.py) is a short random NumPy function of
1-3 float64 arrays ending in a scalar loss. gradjit's ``jit`` value must equal NumPy's
and its ``grad`` w.r.t. every input must equal central finite differences. On the
interpreter, a program of two or more inputs runs again with one input read from
outside the function (a dict, list, attribute, global, closure cell or array changed in
place: tests/random_programs/outside.py), changed between two calls of one ``jit`` and
one ``grad``: both calls must match the state they saw. A
``gj.GradjitError`` is a refusal (counted and grouped by message); any other exception
is a crash; a wrong number is a failure. Programs whose finite differences are unstable
(a kink nearby) are discarded and replaced. Program ``k`` of a run is drawn from seed
``S + k`` (``--seed S``), so a failure is reproduced by ``--one S+k``.

Prints the counts, the refusals by message, and every wrong result and crash with a
(shrunk) repro; exits 1 when any program was wrong or crashed. Ctrl-C stops the run and
reports the programs checked so far.
"""
from __future__ import annotations

import argparse
import atexit
import collections
import contextlib
import os
import shutil
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
if "GRADJIT_CACHE_DIR" not in os.environ:   # a cache of its own, removed at exit (hundreds of MB)
    os.environ["GRADJIT_CACHE_DIR"] = tempfile.mkdtemp(prefix="gradjit-random-programs-")
    atexit.register(shutil.rmtree, os.environ["GRADJIT_CACHE_DIR"], True)

from tests.random_programs.generator import (KNOWN_BUGS, check_program, executor,  # noqa: E402
                                             normalize_message, random_program, shrink)


def _same_failure(out):
    def fails(p):
        o = check_program(p)
        if o.kind != out.kind or o.stage != out.stage:
            return False
        if out.kind == "crash":
            return type(o.error) is type(out.error)
        return True
    return fails


def _common(feature_sets):
    """The features every program of a group has, else the three most frequent."""
    common = set.intersection(*map(set, feature_sets))
    if common:
        return ", ".join(sorted(common))
    c = collections.Counter(f for fs in feature_sets for f in fs)
    return ", ".join(f"{f} ({k}/{len(feature_sets)})" for f, k in c.most_common(3))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=1000, help="programs to check (default 1000)")
    ap.add_argument("--long", action="store_true", help="10,000 programs")
    ap.add_argument("--seed", type=int, default=0, help="first program's seed")
    ap.add_argument("--compiled", action="store_true",
                    help="compiled (Numba) executor instead of the NumPy interpreter")
    ap.add_argument("--all", action="store_true",
                    help="include the features listed in KNOWN_BUGS")
    ap.add_argument("--one", type=int, default=None, help="check only the program of this seed, verbosely")
    ap.add_argument("--no-shrink", action="store_true", help="report failures unshrunk")
    ap.add_argument("--max-steps", type=int, default=12)
    ap.add_argument("--features", action="store_true", help="print how often each feature was checked")
    ap.add_argument("--quiet", action="store_true", help="no progress lines")
    args = ap.parse_args(argv)
    n = 10000 if args.long else args.n
    exclude = () if args.all else tuple(KNOWN_BUGS)
    mode = None if args.compiled else "numpy"

    if args.one is not None:
        prog = random_program(args.one, exclude, max_steps=args.max_steps)
        with executor(mode):
            out = check_program(prog)
        print(prog.repro())
        print(f"features: {sorted(prog.features)}")
        print(f"outcome: {out.kind} {out.stage}\n{out.detail}")
        return 0 if out.kind in ("pass", "refused", "discard") else 1

    counts = collections.Counter()
    refusals = collections.defaultdict(list)       # (class, message) -> [seeds]
    failures = []                                  # (seed, outcome)
    features = collections.Counter()
    refusal_features = collections.defaultdict(list)
    t0 = time.perf_counter()
    seed = args.seed
    checked = 0
    with executor(mode), contextlib.suppress(KeyboardInterrupt):   # (Ctrl-C: report so far)
        while checked < n:
            prog = random_program(seed, exclude, max_steps=args.max_steps)
            try:
                out = check_program(prog)
            except Exception as e:  # noqa: BLE001  (the harness itself must not stop the run)
                print(f"seed {seed}: harness error {type(e).__name__}: {e}", file=sys.stderr)
                counts["harness_error"] += 1
                seed += 1
                if counts["harness_error"] >= 20 and counts["harness_error"] > checked:
                    print("stopping: the harness fails on most programs", file=sys.stderr)
                    break
                continue
            seed += 1
            if out.kind == "discard":
                counts["discarded"] += 1
                continue
            checked += 1
            counts[out.kind] += 1
            if out.kind == "pass":
                features.update(prog.features)
            elif out.kind == "refused":
                key = (type(out.error).__name__, normalize_message(str(out.error)))
                refusals[key].append(seed - 1)
                refusal_features[key].append(prog.features)
            else:
                failures.append((seed - 1, out))
                if not args.quiet:
                    print(f"seed {seed - 1}: {out.kind.upper()} in {out.stage}: "
                          f"{out.detail.splitlines()[0][:200]}", file=sys.stderr)
            if not args.quiet and checked % 200 == 0:
                dt = time.perf_counter() - t0
                print(f"  {checked}/{n} programs, {dt:.0f} s, {dict(counts)}", file=sys.stderr)
    dt = time.perf_counter() - t0

    print(f"\n== random programs: {'compiled' if args.compiled else 'interpreted'} executor, "
          f"seeds {args.seed}..{seed - 1}, {dt:.1f} s"
          f"{', KNOWN_BUGS included' if args.all else ''}")
    print(f"programs {checked}  passed {counts['pass']}  refused {counts['refused']}  "
          f"wrong {counts['wrong']}  crashed {counts['crash']}  "
          f"(discarded for unstable finite differences: {counts['discarded']}"
          f"{', harness errors: ' + str(counts['harness_error']) if counts['harness_error'] else ''})")
    if refusals:
        print("\n-- refusals by message (count, error class, message, first seeds)")
        for (cls, msg), seeds in sorted(refusals.items(), key=lambda kv: -len(kv[1])):
            print(f"{len(seeds):6d}  {cls}: {msg}\n        seeds {seeds[:5]}; "
                  f"features: {_common(refusal_features[(cls, msg)])}")
    if args.features:
        print("\n-- passed programs per feature")
        for feat, c in sorted(features.items()):
            print(f"{c:6d}  {feat}")
    for seed_, out in failures:
        prog = out.prog
        if not args.no_shrink:
            with executor(mode):
                prog = shrink(prog, _same_failure(out))
                again = check_program(prog)
            out = again if again.kind == out.kind else out
        print(f"\n-- {out.kind.upper()} (seed {seed_}, {out.stage}): {sorted(prog.features)}")
        print(out.detail)
        print(prog.repro())
    if not refusals and not failures:
        print("no refusals, no failures")
    return 1 if counts["wrong"] or counts["crash"] or counts["harness_error"] else 0


if __name__ == "__main__":
    sys.exit(main())
