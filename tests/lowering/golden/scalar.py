"""gradjit generated module: 3 IR nodes, graph 'scalar'."""
import math

import numba
import numpy as np
from numba import prange
from gradjit.lowering import pipeline_cpu as pl
# gradjit.lowering.pipeline_cpu <sha>
# gradjit.lowering.boxing_cpu <sha>

LLVM_OPT = 1


@numba.njit(error_model="numpy", no_cfunc_wrapper=True, pipeline_class=pl.Lean)
def entry(v0, v1, consts):
    # loop over (): %2, %3, %4
    t2 = v0 * v1  # %2:float64[] = mul.Tensor(%0, %1)
    t3 = math.sin(t2)  # %3:float64[] = sin.default(%2)
    t4 = t3 + v0  # %4:float64[] = add.Tensor(%3, %0, alpha=<const>)
    v4 = t4
    return (v4,)
