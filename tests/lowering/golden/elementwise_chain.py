"""gradjit generated module: 5 IR nodes, graph 'elementwise_chain'."""
import math

import numba
import numpy as np
from numba import prange
from gradjit.lowering import alloc_cpu as al
from gradjit.lowering import fastmath_cpu as fm
from gradjit.lowering import pipeline_cpu as pl
from gradjit.lowering.codegen_cpu import SignatureMismatch
# gradjit.lowering.alloc_cpu <sha>
# gradjit.lowering.fastmath_cpu <sha>
# gradjit.lowering.pipeline_cpu <sha>
# gradjit.lowering.boxing_cpu <sha>

LLVM_OPT = 1


@numba.njit(error_model="numpy", no_cfunc_wrapper=True, pipeline_class=pl.Lean)
def entry(v0, v1, consts):
    if v0.shape != (8, 16) or v1.shape != (16,):
        raise SignatureMismatch('gradjit: argument shapes differ from the ones this function was compiled for')
    c0 = np.float64(consts[0])
    c1 = np.float64(consts[1])
    # loop over (8, 16): %2, %3, %4, %5, %6
    v6 = al.empty((np.int64(8), np.int64(16)), np.float64)
    for i0 in range(8):
        for i1 in range(16):
            t2 = v0[i0, i1] * v1[i1]  # %2:float64[8,16] = mul.Tensor(%0, %1)
            t3 = t2 + c0  # %3:float64[8,16] = add.Scalar(%2, other=<const>, alpha=<const>)
            t4 = fm.tanh(t3)  # %4:float64[8,16] = tanh.default(%3)
            t5 = t4 - v0[i0, i1]  # %5:float64[8,16] = sub.Tensor(%4, %0, alpha=<const>)
            t6 = t5 * c1  # %6:float64[8,16] = mul.Scalar(%5, other=<const>)
            v6[i0, i1] = t6
    return (v6,)
