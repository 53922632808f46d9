"""A fresh process for the cache's fault tests: takes the gradients of N distinct programs on
a cache dir and reports them, the files each one added, the counters and the warnings.

Run as ``python cache_child.py N``; prints one JSON line. Program ``i`` differs from the
others in its structure (so it has its own generated module, plan, link record and Numba
files)."""
import json
import logging
import os
import sys

import numpy as np

import gradjit as gj
from gradjit.tracer import cache_store


def program(i):
    """Program ``i``: a chain of ``i % 4 + 1`` sines and ``i // 4 + 1`` tanh steps."""
    def f(w, x):
        y = w * x
        for _ in range(i % 4 + 1):
            y = np.sin(y) + 0.25 * y
        for _ in range(i // 4 + 1):
            y = np.tanh(y) * x
        return (y * y).sum()
    return f


def listing(root):
    return {os.path.relpath(os.path.join(d, f), root) for d, _, fs in os.walk(root) for f in fs}


class Caught(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


def main(n):
    caught = Caught()
    cache_store.LOG.addHandler(caught)
    root = cache_store.configured_dir()
    w, x = np.linspace(-1.0, 1.0, 7), np.linspace(0.5, 1.5, 7)
    grads, files = [], []
    for i in range(n):
        before = listing(root) if os.path.isdir(root) else set()
        grads.append(gj.grad(program(i))(w, x).tolist())
        files.append(sorted(listing(root) - before) if os.path.isdir(root) else [])
    print(json.dumps({"g": grads, "files": files, "stats": gj.stats(),
                      "warnings": caught.messages}))


if __name__ == "__main__":
    main(int(sys.argv[1]))
