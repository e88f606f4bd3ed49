import numpy as np
from support import assert_close, run_op


def test_add_broadcasts():
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    b = np.array([1, 2, 3], dtype=np.float32)
    assert_close(run_op("AddV2", [a, b]), a + b)
