"""gradjit generated module: 3 IR nodes, graph 'matmul_broadcast'."""
import math

import numba
import numpy as np
from numba import prange
from gradjit.lowering import alloc_cpu as al
from gradjit.lowering import blas_cpu as bl
from gradjit.lowering import pipeline_cpu as pl
from gradjit.lowering.codegen_cpu import SignatureMismatch
# gradjit.lowering.alloc_cpu <sha>
# gradjit.lowering.blas_cpu <sha>
# gradjit.lowering.pipeline_cpu <sha>
# gradjit.lowering.boxing_cpu <sha>

LLVM_OPT = 1


@numba.njit(error_model="numpy", no_cfunc_wrapper=True, pipeline_class=pl.Lean)
def entry(v0, v1, v2, consts):
    if v0.shape != (4, 8) or v1.shape != (8, 3) or v2.shape != (3,):
        raise SignatureMismatch('gradjit: argument shapes differ from the ones this function was compiled for')
    v3 = bl.mm(v0, v1)  # %3:float64[4,3] = mm.default(%0, %1)
    # loop over (4, 3): %4, %5
    v5 = al.empty((np.int64(4), np.int64(3)), np.float64)
    for i0 in range(4):
        for i1 in range(3):
            t4 = v3[i0, i1] + v2[i1]  # %4:float64[4,3] = add.Tensor(%3, %2, alpha=<const>)
            t5 = 0.0 if t4 <= 0 else t4  # %5:float64[4,3] = relu.default(%4)
            v5[i0, i1] = t5
    return (v5,)
