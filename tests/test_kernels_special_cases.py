"""The Bessel functions (runtime/kernels/bessel_ops.py) and Dawson's, the exponential, Fresnel and Spence's
integrals (runtime/kernels/special_ops.py), ``tf.math.special.*``, against what TensorFlow 2.21 computed
(tools/make_op_case_fixtures.py, group "special"): float32 and float64 on every branch of Cephes' fits, their
boundaries, 0 and -0, infinities and NaN.

The integrals follow TensorFlow's code step for step in the input's type: float64 to the last bit, float32
within an ulp (numpy's float32 exp and log round a few values differently from the C library's). The Bessel
functions use Cephes' float64 fits for every type (float64 within 1e-14), where TensorFlow's float32 uses
Cephes' shorter float32 ones: within 1e-6 relative, 3e-6 absolute for J and Y near their zeros, except
where both lose all precision (the phase of J and Y past 1e9)."""

from __future__ import annotations

import numpy as np
import pytest
from support import OpCases

CASES = OpCases("special")


def _tolerance(case: str, x: np.ndarray) -> tuple[float, np.ndarray]:
    """(rtol, atol per element) against TensorFlow."""
    oscillating = case.startswith(("BesselJ", "BesselY"))
    if x.dtype == np.float64:
        return (0.0, np.zeros(x.shape)) if not case.startswith("Bessel") else (1e-14, np.full(x.shape, 1e-16))
    if x.dtype == np.float16:
        return 1e-3, np.full(x.shape, 1e-3)
    if not case.startswith("Bessel"):  # numpy's float32 exp and log, a last bit from the C library's
        return 3e-7, np.zeros(x.shape)
    # Cephes' float32 fits of J and Y are accurate to a few 1e-7 absolute, which is large near their zeros;
    # past 1e9 float32 cannot hold their phase
    atol = np.full(x.shape, 3e-6 if oscillating else 2e-7)
    if oscillating:
        atol[np.abs(x) > 1e9] = 2e-5
    return 1e-6, atol


@pytest.mark.parametrize("case", CASES.names())
def test_matches_tensorflow(case: str) -> None:
    got, want, _ = CASES.run(case)
    g, w = np.asarray(got[0]), want[0]
    assert (g.dtype, g.shape) == (w.dtype, w.shape)
    x = CASES.arrays[f"{case}/in/{CASES.meta[case]['feeds'][0]}"]
    rtol, atol = _tolerance(case, x)
    assert (np.isnan(g) == np.isnan(w)).all(), case
    assert (g[np.isinf(w)] == w[np.isinf(w)]).all() and np.isinf(g).sum() == np.isinf(w).sum(), case
    ok = np.isfinite(w)
    with np.errstate(all="ignore"):
        err = np.abs(g[ok].astype(np.float64) - w[ok])
        bound = atol[ok] + rtol * np.abs(w[ok].astype(np.float64))
    assert (err <= bound).all(), f"{case}: {x[ok][err > bound]} {g[ok][err > bound]} {w[ok][err > bound]}"


def test_fixture_covers_each_function_in_both_types() -> None:
    ops = {m["op"] for m in CASES.meta.values()}
    assert len(ops) == 17
    assert all(f"{op}_f32" in CASES.meta and f"{op}_f64" in CASES.meta for op in ops)
