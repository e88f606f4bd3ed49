"""Fourier transforms and complex parts. Expected values are TensorFlow 2.21's (tf.raw_ops on the same
inputs); tools/op_fuzz_fft.py compares the kernels with TensorFlow on random cases."""

from __future__ import annotations

import numpy as np
import pytest
from support import run_op

from poolserve.runtime.errors import InvalidArgumentError


def test_rfft_crops_to_fft_length_and_irfft_reads_half_plus_one():
    x = np.array([[1.0, 2.0, 0.5, -1.0, 3.0, 0.0]], np.float32)
    out = run_op("RFFT", [x, np.array([4], np.int32)], {"Tcomplex": np.complex64})
    assert out.dtype == np.complex64
    np.testing.assert_allclose(out, [[2.5 + 0j, 0.5 - 3j, 0.5 + 0j]], rtol=1e-6)
    z = np.array([[1 + 0j, 2 - 1j, 0.5 + 0.5j]], np.complex64)
    back = run_op("IRFFT", [z, np.array([4], np.int32)], {"Treal": np.float32})
    assert back.dtype == np.float32
    np.testing.assert_allclose(back, [[1.375, 0.625, -0.625, -0.375]], rtol=1e-6)
    with pytest.raises(
        InvalidArgumentError, match="Input dimension 1 must have length of at least 8 but got: 6"
    ):
        run_op("RFFT", [x, np.array([8], np.int32)], {"Tcomplex": np.complex64})


def test_fft2d_and_complex_parts():
    z = np.array([[1 + 1j, 2], [0, -1j]], np.complex64)
    np.testing.assert_allclose(run_op("FFT2D", [z]), [[3 + 0j, -1 + 2j], [3 + 2j, -1 + 0j]], rtol=1e-6)
    np.testing.assert_allclose(run_op("IFFT2D", [run_op("FFT2D", [z])]), z, rtol=1e-6, atol=1e-7)
    assert run_op("Real", [z], {"Tout": np.float32}).dtype == np.float32
    np.testing.assert_array_equal(run_op("Imag", [z], {"Tout": np.float32}), [[1, 0], [0, -1]])
    np.testing.assert_allclose(
        run_op("ComplexAbs", [z], {"Tout": np.float32}), [[2**0.5, 2], [0, 1]], rtol=1e-6
    )
    np.testing.assert_array_equal(run_op("Conj", [z]), np.conj(z))
    c = run_op("Complex", [np.array([1.0, 2.0], np.float32), np.float32(3)], {"Tout": np.complex64})
    np.testing.assert_array_equal(c, [1 + 3j, 2 + 3j])
