"""lowering/cuda_pool.py: which allocations of a CUDA host launcher are reused (text only)."""
from gradjit.lowering.cuda_pool import pool_buffers


def test_buffers_a_result_aliases_stay_fresh():
    host = ["    v4 = cuda.device_array((9, 1), np.float64)",
            "    cm.mm(v1, v3, v4)  # %4 = mm",
            "    v5 = v4.reshape((9,))  # %5 = view",
            "    p6 = cuda.device_array((8,), np.float64)",
            "    k1[8, 32](v5, p6, consts)",
            "    v7 = cuda.device_array((3, 2), np.float64)  # %7 = exp",
            "    v8 = cm.tview(v7)",
            "    v9 = cuda.device_array((1,), np.float64)",
            "    k2[1, 32](p6, v9, consts)"]
    out, slots = pool_buffers(host, ["v5", "v8"])
    assert slots == 2   # p6 and v9; v4 (reshaped into v5) and v7 (transposed into v8) are fresh
    assert out[0] == host[0] and out[5] == host[5]
    assert out[3] == "    p6 = ws(0, (8,), np.float64)"
    assert out[7] == "    v9 = ws(1, (1,), np.float64)"


def test_comment_is_kept_and_result_itself_is_fresh():
    host = ["    v2 = cuda.device_array((4,), np.float32)  # %2 = sin", "    k1[1, 32](v0, v2, consts)",
            "    v3 = cuda.device_array((4,), np.float32)  # %3 = cos"]
    out, slots = pool_buffers(host, ["v3"])
    assert slots == 1 and out[0] == "    v2 = ws(0, (4,), np.float32)  # %2 = sin"
    assert out[2] == host[2]
