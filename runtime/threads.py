"""How many threads gradjit's compiled code runs on: the cores free now, decided per call.

Contract
- ``threaded(fn, blas)`` wraps a compiled callable that runs parallel loops or large
  products. Each call runs ``fn`` on ``k`` of Numba's threads (``numba.set_num_threads``
  in the calling thread, put back afterwards), where ``k`` is the number of cores this
  process may use that no other process is keeping busy (``cores()``), never more than
  the caller's own Numba setting. With ``blas``, every BLAS library threadpoolctl finds
  runs on one thread while any such call is in flight (a count shared by all threads;
  the last one out restores the libraries' own settings): gradjit's products are then
  blocks over Numba's threads (``lowering/blas_cpu.py``), one pool, never BLAS threads
  nested in Numba's.
- ``cores()``: the cores this process may use (affinity, a cgroup CPU quota), less the
  busy time of other processes over the last sampling window (``/proc/stat`` less this
  process's own CPU time, sampled at most every ``WINDOW`` seconds from the calls
  themselves, no thread of its own). Where ``/proc/stat`` is missing, the allowed count.
- ``set_num_threads(n)`` / ``$GRADJIT_NUM_THREADS`` fix the count (no sampling);
  ``set_num_threads(None)`` returns to sampling. ``info()`` reports the state.
Why: with a static split of work, one thread of ours that another process's thread
keeps off its core holds the whole call up: on two cores with one busy, the MLP
gradient took 2-20x its quiet time; on the free core alone it takes about 1.7x.
"""
from __future__ import annotations

import logging
import math
import os
import threading
import time

import numba

WINDOW = 0.1        # seconds between two samples of the machine's load
_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _allowed():
    """The CPU ids this process may run on, and the core count a cgroup quota allows."""
    try:
        cpus = sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = list(range(os.cpu_count() or 1))
    cap = len(cpus)
    try:
        with open("/sys/fs/cgroup/cpu.max") as f:
            quota, period = f.read().split()[:2]
        if quota != "max":
            cap = min(cap, max(1, math.ceil(int(quota) / int(period))))
    except (OSError, ValueError):
        pass
    return cpus, min(cap, numba.config.NUMBA_NUM_THREADS)


class _Cores:
    def __init__(self):
        self.cpus, self.cap = _allowed()
        self.ids = {f"cpu{c}".encode() for c in self.cpus}
        self.fixed = None
        env = os.environ.get("GRADJIT_NUM_THREADS")
        if env:
            self.fixed = max(1, int(env))
        self.k = self.cap
        self.next = 0.0
        self.last = None          # (wall time, busy seconds of all, own CPU seconds)
        self.lock = threading.Lock()

    def busy_seconds(self):
        """Busy time (user, nice, system, irq, softirq, steal) of the allowed CPUs, in s."""
        total = 0
        with open("/proc/stat", "rb") as f:
            for line in f:
                if not line.startswith(b"cpu"):
                    break
                parts = line.split()
                if parts[0] in self.ids:
                    v = [int(x) for x in parts[1:9]]
                    total += sum(v) - v[3] - v[4]       # less idle and iowait
        return total / _TICK

    def sample(self, now):
        with self.lock:
            if now < self.next:
                return self.k
            self.next = now + WINDOW
            try:
                cur = (now, self.busy_seconds(), time.process_time())
            except (OSError, ValueError, IndexError):
                self.next = math.inf               # no /proc/stat: keep the allowed count
                return self.k
            if self.last is not None and cur[0] > self.last[0]:
                others = ((cur[1] - self.last[1]) - (cur[2] - self.last[2])) / (cur[0] - self.last[0])
                # a quarter core of slack: the tick counts are 10 ms coarse
                self.k = max(1, min(self.cap, int(len(self.cpus) - max(others, 0.0) + 0.25)))
            self.last = cur
            return self.k

    def __call__(self):
        if self.fixed is not None:
            return self.fixed
        now = time.monotonic()
        return self.k if now < self.next else self.sample(now)


cores = _Cores()


def set_num_threads(n):
    """Fix the number of threads gradjit's compiled code runs on (``None``: the free cores)."""
    if n is not None and (not isinstance(n, int) or n < 1):
        raise ValueError(f"gj.set_num_threads: expected a positive int or None, got {n!r}")
    cores.fixed = n


def info():
    return {"allowed": cores.cap, "threads": cores(), "fixed": cores.fixed is not None}


# -- BLAS on one thread while compiled products run ---------------------------------------------
class _Blas:
    def __init__(self):
        self.lock = threading.Lock()
        self.depth = 0
        self.libs = None           # threadpoolctl controllers of the BLAS libraries loaded
        self.saved = ()
        self.pinned = False

    def enter(self):
        with self.lock:
            if self.depth == 0:
                if self.libs is None:
                    self.libs = _blas_controllers()
                self.saved = [c.get_num_threads() for c in self.libs]
                for c, n in zip(self.libs, self.saved):
                    if n != 1:
                        c.set_num_threads(1)
            self.depth += 1

    def leave(self):
        with self.lock:
            self.depth -= 1
            if self.depth == 0:
                for c, n in zip(self.libs, self.saved):
                    if n != 1:
                        c.set_num_threads(n)


def _blas_controllers():
    """The BLAS libraries of this process, SciPy's (what compiled code calls) loaded first."""
    import scipy.linalg.cython_blas  # noqa: F401 - loads the library Numba's BLAS calls
    from threadpoolctl import ThreadpoolController
    return ThreadpoolController().select(user_api="blas").lib_controllers


blas = _Blas()


def threaded(fn, uses_blas):
    """``fn`` run on the free cores (see the contract); ``.native`` is ``fn`` itself."""
    get, put = numba.get_num_threads, numba.set_num_threads

    def call(*args):
        mine = get()
        k = min(cores(), mine)
        if k != mine:
            put(k)
        if uses_blas:
            blas.enter()
        try:
            return fn(*args)
        finally:
            if uses_blas:
                blas.leave()
            if k != mine:
                put(mine)
    call.native, call.blas = fn, uses_blas
    return call


def blas_single_for_good():
    """Every BLAS library on one thread from now on (code called from @njit, where no
    Python runs around the call to do it per call)."""
    with blas.lock:
        if blas.pinned:
            return
        blas.pinned = True
        if blas.libs is None:
            blas.libs = _blas_controllers()
        if blas.depth == 0:
            for c in blas.libs:
                c.set_num_threads(1)
        else:   # restored to one thread when the calls in flight end
            blas.saved = [1] * len(blas.libs)
    logging.getLogger("gradjit").info(
        "gradjit: BLAS set to one thread for good: a transform with large products is called "
        "from @njit code, and runs them over Numba's threads")
