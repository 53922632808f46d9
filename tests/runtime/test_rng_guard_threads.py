"""Random draws under tracing (tracer/rng_guard.py) beside other threads: a generator's
state cannot say which thread drew, so the refusal says both."""
from __future__ import annotations

import threading

import numpy as np
import pytest

import gradjit as gj
from gradjit.tracer.rng_guard import RandomnessUnderTraceError


def test_the_refusal_names_other_threads_when_there_are_some():
    stop = threading.Event()
    t = threading.Thread(target=stop.wait, args=(30,))
    t.start()
    try:
        with pytest.raises(RandomnessUnderTraceError, match="or another thread"):
            gj.grad(lambda x: (x * np.random.normal()).sum())(np.ones(2))
    finally:
        stop.set()
        t.join()
