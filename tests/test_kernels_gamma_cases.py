"""Igamma, Igammac, Betainc, Zeta and Polygamma (runtime/kernels/gamma_ops.py) against what TensorFlow 2.21
computed (tools/make_op_case_fixtures.py, group "gamma"), float32 and float64: both sides of the switch
between series and continued fraction, large parameters, and the edges of the domains (0, inf, negative
and NaN arguments, zeta's poles at non-positive integers). poolserve sums in float64 and rounds once;
TensorFlow sums in the input's type and loses digits in float32 (1e-4 relative on betainc; 3 digits
for igamma at a = 1e4, left out), so float32 is compared to 1e-4 relative, float64 to 1e-9."""

from __future__ import annotations

import numpy as np
import pytest
from support import OpCases

CASES = OpCases("gamma")


@pytest.mark.parametrize("case", CASES.names())
def test_matches_tensorflow(case: str) -> None:
    got, want, error = CASES.run(case)
    assert error is None and want is not None
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype and g.shape == w.shape
        rtol = 1e-4 if w.dtype == np.float32 else 1e-9
        np.testing.assert_allclose(g, w, rtol=rtol, atol=0, err_msg=case)
