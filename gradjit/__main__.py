"""``python -m gradjit demo``: train a small MLP with compiled gradients.

Contract
- ``python -m gradjit demo`` trains a 2-layer MLP (tanh hidden layer, softmax
  cross-entropy written with ``log_softmax`` and a one-hot matrix) on three
  Gaussian blobs generated here with a fixed seed (no downloads), with plain
  minibatch SGD on gradients from ``gj.value_and_grad`` (jit mode). It prints
  the loss per epoch, the final accuracy, the compile time
  (``gj.stats()['compile_seconds']`` and the wall time of the first call), the
  cache counters (``compiles``, ``disk_hits``, ``memory_hits``) and the median
  time per gradient call in µs. It then runs a few steps in tensor mode
  (``.backward()``) and reports the per-step time and that the backward was
  built once and reused.
- The compile cache is ``$GRADJIT_CACHE_DIR`` (else the user cache dir), so a
  second run loads the compiled code from disk instead of compiling it.
- Any other subcommand (or none) prints the usage and exits with status 2.
  The exit status is 1 if the training did not learn (a smoke test for CI).
- A facade module: it only uses the public API, and holds no library logic.
"""
from __future__ import annotations

import sys
import time

import numpy as np

import gradjit as gj

USAGE = """usage: python -m gradjit <command>

commands:
  demo      train a small MLP with compiled gradients and report timings/caching
  coverage  every derivatives.yaml entry: CPU code generation and tests, with totals;
            the size of the NumPy conformance table (tests/conformance/opinfo.py)
"""

N_PER_CLASS, N_HIDDEN, BATCH, EPOCHS, LR = 200, 32, 50, 20, 0.05


def make_blobs(seed=0):
    """Three 2-D Gaussian blobs: X (n, 2) float64, labels (n,), one-hot Y (n, 3)."""
    rng = np.random.default_rng(seed)
    centers = np.array([[0.0, 2.0], [-1.8, -1.0], [1.8, -1.0]])
    X = np.concatenate([c + 0.9 * rng.standard_normal((N_PER_CLASS, 2)) for c in centers])
    labels = np.repeat(np.arange(3), N_PER_CLASS)
    perm = rng.permutation(len(X))
    X, labels = X[perm], labels[perm]
    return X, labels, np.eye(3)[labels]


def init_params(seed=1):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((2, N_HIDDEN)) / np.sqrt(2), np.zeros(N_HIDDEN),
            rng.standard_normal((N_HIDDEN, 3)) / np.sqrt(N_HIDDEN), np.zeros(3)]


def loss_fn(W1, b1, W2, b2, X, Y):
    """Mean softmax cross-entropy of a tanh MLP (no indexing: one-hot Y)."""
    h = np.tanh(X @ W1 + b1)
    logits = h @ W2 + b2
    return -(logits.log_softmax(1) * Y).sum() / X.shape[0]


def accuracy(params, X, labels):
    W1, b1, W2, b2 = params
    return float(np.mean(np.argmax(np.tanh(X @ W1 + b1) @ W2 + b2, axis=1) == labels))


def demo():
    X, labels, Y = make_blobs()
    params = init_params()
    print(f"gradjit {gj.__version__} demo: MLP 2-{N_HIDDEN}-3 (tanh), softmax cross-entropy, "
          f"{len(X)} points in 3 blobs, batch {BATCH}, SGD lr={LR}")
    print(f"compile cache: {gj.cache_dir()}\n")

    vg = gj.value_and_grad(loss_fn, argnums=(0, 1, 2, 3))
    gj.reset_stats()
    times = []
    for epoch in range(1, EPOCHS + 1):
        total = 0.0
        for s in range(0, len(X), BATCH):
            t0 = time.perf_counter()
            loss, grads = vg(*params, X[s:s + BATCH], Y[s:s + BATCH])
            times.append(time.perf_counter() - t0)
            params = [p - LR * g for p, g in zip(params, grads)]
            total += float(loss)
        print(f"epoch {epoch:2d}  loss {total / (len(X) // BATCH):.4f}")
    gj.wait_compiled()    # (a background compile still running: let it finish and count)
    st = gj.stats()
    acc = accuracy(params, X, labels)
    steady = times[1:]
    print(f"\nfinal training accuracy: {acc:.1%}")
    print(f"first call (trace + optimise + compile or load): {times[0] * 1e3:.1f} ms wall; "
          f"compile_seconds={st['compile_seconds']:.3f}")
    if st["interpreted_calls"]:
        print(f"  ({st['interpreted_calls']} calls ran on the NumPy interpreter while Numba "
              f"compiled in the background; gj.set_tiering('sync') waits instead)")
    print(f"cache: compiles={st['compiles']} disk_hits={st['disk_hits']} "
          f"memory_hits={st['memory_hits']}"
          + ("  (loaded from the disk cache: run before)" if st["disk_hits"] else
             "  (compiled now; the next run loads it from disk)" if st["compiles"] else ""))
    print(f"gradient calls: {len(times)}; median {np.median(steady) * 1e6:.1f} µs per call "
          f"(min {np.min(steady) * 1e6:.1f} µs, after the first; the interpreted calls included)")

    print("\ntensor mode (forward eager, compiled .backward()):")
    gj.reset_stats()
    tparams = [gj.tensor(p, requires_grad=True) for p in init_params()]
    Xt, Yt = gj.tensor(X[:BATCH]), gj.tensor(Y[:BATCH])
    steps = []
    for step in range(5):
        t0 = time.perf_counter()
        loss = loss_fn(*tparams, Xt, Yt)
        loss.backward()
        steps.append(time.perf_counter() - t0)
        for p in tparams:
            p.data -= LR * np.asarray(p.grad)
            p.grad = None
        print(f"  step {step}  loss {float(loss):.4f}  {steps[-1] * 1e6:9.1f} µs")
    gj.wait_compiled()
    st = gj.stats()
    built = st["compiles"] + st["disk_hits"]
    print(f"  backward built {built}x (compiles={st['compiles']} disk_hits={st['disk_hits']}), "
          f"reused {st['memory_hits']}x; median step after the first "
          f"{np.median(steps[1:]) * 1e6:.1f} µs")
    ok = acc > 0.8 and built == 1
    if not ok:
        print("demo FAILED: the model did not learn or tensor mode rebuilt its backward")
    return 0 if ok else 1


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv == ["demo"]:
        return demo()
    if argv == ["coverage"]:
        from gradjit.runtime.coverage import main as coverage   # logic lives in runtime/
        return coverage()
    sys.stderr.write(USAGE if not argv or argv[0] in ("-h", "--help") else
                     f"unknown command: {' '.join(argv)}\n\n{USAGE}")
    return 0 if argv and argv[0] in ("-h", "--help") else 2


if __name__ == "__main__":
    sys.exit(main())
