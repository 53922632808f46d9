"""A fresh Python process that takes one gradient of a 40-step tanh RNN on a given cache
directory and reports what happened (shared by the disk-cache tests of runtime/levels.py
and runtime/links.py)."""
import json
import os
import subprocess
import sys
import textwrap

_CHILD = textwrap.dedent("""
    import json, numpy as np, gradjit as gj
    from gradjit.runtime import levels, links
    rng = np.random.default_rng(0)
    Wx, Wh, b, h = rng.normal(size=(3, 4)) / 2, rng.normal(size=(4, 4)) / 3, rng.normal(size=4), rng.normal(size=(1, 4))
    xs = [rng.normal(size=(1, 3)) for _ in range(40)]
    def rnn(Wx, Wh, b, h, *xs):
        for x in xs:
            h = np.tanh(x @ Wx + h @ Wh + b)
        return (h * h).sum()
    g = gj.grad(rnn, argnums=(0, 1, 2))(Wx, Wh, b, h, *xs)
    print(json.dumps({"stats": gj.stats(), "emitted": levels.STATS["emitted"],
                      "links": links.STATS, "g": [a.tolist() for a in g]}))
""")


def rnn_child(cache):
    """{"stats": gj.stats(), "emitted": ..., "links": ..., "g": the gradients as lists}."""
    env = dict(os.environ, GRADJIT_CACHE_DIR=str(cache))
    for k in ("GRADJIT_EXECUTOR", "NUMBA_OPT"):
        env.pop(k, None)
    out = subprocess.run([sys.executable, "-c", _CHILD], env=env, capture_output=True,
                         text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])
