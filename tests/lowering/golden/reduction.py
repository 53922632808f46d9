"""gradjit generated module: 3 IR nodes, graph 'reduction'."""
import math

import numba
import numpy as np
from numba import prange
from gradjit.lowering import alloc_cpu as al
from gradjit.lowering import pipeline_cpu as pl
from gradjit.lowering.codegen_cpu import SignatureMismatch
# gradjit.lowering.alloc_cpu <sha>
# gradjit.lowering.pipeline_cpu <sha>
# gradjit.lowering.boxing_cpu <sha>

LLVM_OPT = 1


@numba.njit(error_model="numpy", no_cfunc_wrapper=True, pipeline_class=pl.Lean)
def entry(v0, v1, consts):
    if v0.shape != (8, 16) or v1.shape != (8, 16):
        raise SignatureMismatch('gradjit: argument shapes differ from the ones this function was compiled for')
    # loop over (8, 16): %2, %3, %4
    v4 = al.full((np.int64(8),), 0.0, np.float64)
    for i0 in range(8):
        for i1 in range(16):
            t2 = v0[i0, i1] - v1[i0, i1]  # %2:float64[8,16] = sub.Tensor(%0, %1, alpha=<const>)
            t3 = t2 * t2  # %3:float64[8,16] = pow.Tensor_Scalar(%2, exponent=<const>)
            v4[i0] += t3  # %4:float64[8] = sum.dim_IntList(%3, dim=(1,), keepdim=False)
    return (v4,)
