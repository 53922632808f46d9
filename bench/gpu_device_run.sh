#!/bin/bash
# One prepared run on a lent GPU machine (no network there): what the CPU-only CI cannot check.
#
# Contract
# - Run from the repository root. Writes env.txt, timing.log, gpu_check*.json,
#   pytest.log (all but the passes), pytest_full.log and profile.log under $OUT
#   (default /tmp/gpu_out); each part is bounded by its own timeout, so a short
#   device lease still returns what was done.
# - Uses the machine's own Python packages (numba, numba-cuda, NumPy, torch, JAX,
#   pytest-xdist and pytest-timeout: the lent H200's image has them all);
#   only when its numba-cuda is older than 0.30 does it install a wheel carried in
#   .whl/ (numba_cuda-*.whl, fetched beforehand with pip download); and only when a
#   probe gradient fails with the machine's NumPy does it use .whl/np/numpy-*.whl.
# - Part 1: W1/W2/W3/W5 gradient timing, gradjit CUDA against torch CUDA and JAX GPU
#   (bench/gpu_check.py --skip-ops); part 1b (AB_POOL=1, the default) times gradjit
#   again with GRADJIT_CUDA_POOL=0 (no buffer reuse).
# - Part 2: the device op suite (tests/cuda/sim/test_sim_ops.py) on the real GPU
#   (GRADJIT_TEST_GPU=1): every op's CUDA gradient against the CPU path, float64
#   and float32, plus tensor mode, device arrays and the blocked matmul; one
#   pytest-xdist worker per core, each with its own compile cache (tests/conftest.py),
#   so no worker waits on another's compile lock. The PTX tests run too.
# - Part 3 (PROFILE=1, the default): a cProfile of gradjit's CUDA calls per workload
#   with CUDA_LAUNCH_BLOCKING=1, so each kernel's time lands on the line that launched it.
# - CHECK_ARGS adds arguments to part 1, TEST_K selects tests of part 2 (a local dry
#   run under the simulator: NUMBA_ENABLE_CUDASIM=1 CHECK_ARGS=--tiny TEST_K=tensor_mode).
set -u
OUT=${OUT:-/tmp/gpu_out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
PY=${PY:-python3}
T_TIMING=${T_TIMING:-150}
T_TESTS=${T_TESTS:-280}
WORKERS=${WORKERS:-$(( $(nproc) > 2 ? $(nproc) - 2 : 1 ))}

{
  date
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1
  $PY -c "import sys, numpy, numba; print(sys.version); print('numpy', numpy.__version__, 'numba', numba.__version__)"
  $PY -c "import numba_cuda; print('numba-cuda', numba_cuda.__version__)" 2>&1
} 2>&1 | tee "$OUT/env.txt"

if ! $PY -c "import sys, numba_cuda; sys.exit(tuple(map(int, numba_cuda.__version__.split('.')[:2])) < (0, 30))" 2>/dev/null; then
  echo "installing the carried numba-cuda wheel" | tee -a "$OUT/env.txt"
  $PY -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/numba_cuda*.whl 2>&1 | tail -3
  export PYTHONPATH=/tmp/site
fi
$PY -m pip install -q --no-index --no-deps --no-build-isolation -e . 2>&1 | grep -v "WARNING: Running pip as" | tail -5
PROBE="import numpy as np, gradjit as gj; from gradjit.runtime import cuda; print('gradjit cuda available:', cuda.available()); print('probe gradient', gj.grad(lambda x: (x * x).sum(), device='cuda')(np.arange(3.0)))"
if ! $PY -c "$PROBE" 2>&1 | tee -a "$OUT/env.txt" | grep -q "probe gradient"; then
  # this numba-cuda cannot run with the machine's NumPy: say so, then carry on with the
  # carried NumPy (.whl/np/numpy-*.whl) so the rest of the run still checks gradjit
  echo "probe failed with the machine's NumPy; installing the carried NumPy" | tee -a "$OUT/env.txt"
  $PY -m pip install -q --no-index --no-deps --no-compile --target /tmp/site_np .whl/np/numpy*.whl 2>&1 | tail -3
  export PYTHONPATH=/tmp/site_np${PYTHONPATH:+:$PYTHONPATH}
  $PY -c "$PROBE" 2>&1 | tail -3 | tee -a "$OUT/env.txt"
fi

echo "== part 1: timing" | tee "$OUT/timing.log"
timeout "$T_TIMING" $PY bench/gpu_check.py --skip-ops --budget 1 --json "$OUT/gpu_check.json" \
  ${CHECK_ARGS:-} 2>&1 | tee -a "$OUT/timing.log"
echo "rc=${PIPESTATUS[0]}" | tee -a "$OUT/timing.log"
if [ "${AB_POOL:-1}" = 1 ]; then   # the same calls without the workspace (fresh buffers each call)
  echo "== part 1b: GRADJIT_CUDA_POOL=0" | tee -a "$OUT/timing.log"
  GRADJIT_CUDA_POOL=0 timeout 60 $PY bench/gpu_check.py --skip-ops --gradjit-only --budget 1 \
    --json "$OUT/gpu_check_nopool.json" ${CHECK_ARGS:-} 2>&1 | grep "^|" | tee -a "$OUT/timing.log"
fi

echo "== part 2: op suite on the GPU, $WORKERS workers" | tee "$OUT/pytest.log"
GRADJIT_TEST_GPU=1 timeout "$T_TESTS" $PY -m pytest -p no:cacheprovider -n "$WORKERS" -v -rfE \
  --timeout 200 ${TEST_K:+-k "$TEST_K"} tests/cuda/sim tests/cuda/test_cuda_ptx.py tests/cuda/test_cuda_errors.py \
  2>&1 | tee "$OUT/pytest_full.log" | grep -v " PASSED " | tee -a "$OUT/pytest.log"
echo "rc=${PIPESTATUS[0]}" | tee -a "$OUT/pytest.log"

if [ "${PROFILE:-1}" = 1 ]; then
  echo "== part 3: where gradjit's CUDA calls spend their time (synchronous launches)" | tee "$OUT/profile.log"
  CUDA_LAUNCH_BLOCKING=1 timeout "${T_PROFILE:-90}" $PY bench/gpu_check.py --skip-ops --profile --budget 0.3 \
    --json "$OUT/profile.json" 2>&1 | grep -v "Warning\|warn(" | tee -a "$OUT/profile.log"
fi
