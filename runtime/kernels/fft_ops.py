"""Fourier transforms and complex parts: FFT, IFFT and their 2-D and 3-D forms over the innermost
dimensions, RFFT/IRFFT (1-3-D) with ``fft_length``, and Complex, Real, Imag, ComplexAbs, Angle, Conj.

What audio front ends leave in a graph (``tf.signal.stft`` and Keras' ``ops.stft``: frames, a window, an
RFFT, a magnitude). numpy's pocketfft computes them; RFFT crops each transformed dimension to ``fft_length``
as TensorFlow does (and refuses a shorter one: ``tf.signal`` pads before the op), IRFFT reads the first
``fft_length // 2 + 1`` values of the last one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from poolserve.runtime.errors import InvalidArgumentError
from poolserve.runtime.kernels._common import _shape_str
from poolserve.runtime.kernels.registry import Compute, OpContext, kernel
from poolserve.runtime.node import Node

_COMPLEX_OF = {np.dtype(np.float32): np.dtype(np.complex64), np.dtype(np.float64): np.dtype(np.complex128)}
_REAL_OF = {v: k for k, v in _COMPLEX_OF.items()}


def _rank_check(x: Any, dims: int, op: str) -> None:
    if x.ndim < dims:
        raise InvalidArgumentError(f"{op}: input must have rank of at least {dims} but got: {x.ndim}")


def _complex_fft(dims: int, inverse: bool) -> Callable[[Node], Compute]:
    fn = np.fft.ifftn if inverse else np.fft.fftn

    def factory(node: Node) -> Compute:
        def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
            (x,) = inputs
            _rank_check(x, dims, node.op)
            if x.size == 0:
                return (np.zeros(x.shape, x.dtype),)
            return (fn(x, axes=tuple(range(-dims, 0))).astype(x.dtype, copy=False),)

        return compute

    return factory


for _dims, _suffix in ((1, ""), (2, "2D"), (3, "3D")):
    kernel(f"FFT{_suffix}", expensive=True)(_complex_fft(_dims, inverse=False))
    kernel(f"IFFT{_suffix}", expensive=True)(_complex_fft(_dims, inverse=True))


def _lengths(node: Node, value: Any, dims: int) -> list[int]:
    if value.shape != (dims,):
        raise InvalidArgumentError(
            f"{node.op}: fft_length must be a vector of {dims}, got shape {_shape_str(value.shape)}"
        )
    lengths = [int(n) for n in value.tolist()]
    if min(lengths) < 0:
        raise InvalidArgumentError(f"{node.op}: fft_length must be non-negative, got {lengths}")
    return lengths


def _real_fft(dims: int, inverse: bool) -> Callable[[Node], Compute]:
    def factory(node: Node) -> Compute:
        out_dtype = node.attr_dtype("Treal" if inverse else "Tcomplex", 1 if inverse else 8)

        def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
            x, length_t = inputs
            _rank_check(x, dims, node.op)
            lengths = _lengths(node, length_t, dims)
            axes = tuple(range(-dims, 0))
            # TensorFlow crops what is longer than fft_length and refuses what is shorter (tf.signal pads
            # before the op); IRFFT's last dimension holds fft_length // 2 + 1 values
            need = [*lengths[:-1], lengths[-1] // 2 + 1 if inverse else lengths[-1]]
            for axis, n in zip(range(x.ndim - dims, x.ndim), need, strict=True):
                if x.shape[axis] < n:
                    raise InvalidArgumentError(
                        f"Input dimension {axis} must have length of at least {n} but got: {x.shape[axis]}"
                    )
            y: Any
            if inverse:
                shape = (*x.shape[:-dims], *lengths)
                if 0 in lengths or x.size == 0:
                    return (np.zeros(shape, out_dtype),)
                y = np.fft.irfftn(x, s=lengths, axes=axes)
            else:
                shape = (*x.shape[:-dims], *lengths[:-1], lengths[-1] // 2 + 1)
                if 0 in lengths or x.size == 0:
                    return (np.zeros(shape, out_dtype),)
                y = np.fft.rfftn(x, s=lengths, axes=axes)
            return (y.astype(out_dtype, copy=False),)

        return compute

    return factory


for _dims, _suffix in ((1, ""), (2, "2D"), (3, "3D")):
    kernel(f"RFFT{_suffix}", expensive=True)(_real_fft(_dims, inverse=False))
    kernel(f"IRFFT{_suffix}", expensive=True)(_real_fft(_dims, inverse=True))


@kernel("Complex")
def complex_(node: Node) -> Compute:
    out = node.attr_dtype("Tout", 8)

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        real, imag = inputs
        try:
            shape = np.broadcast_shapes(real.shape, imag.shape)
        except ValueError:
            raise InvalidArgumentError(
                f"Incompatible shapes: {_shape_str(real.shape)} vs. {_shape_str(imag.shape)}"
            ) from None
        z = np.empty(shape, out)
        z.real, z.imag = real, imag
        return (z,)

    return compute


def _part(fn: Callable[[Any], Any]) -> Callable[[Node], Compute]:
    def factory(node: Node) -> Compute:
        def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
            x = inputs[0]
            real: Any = _REAL_OF.get(x.dtype, x.dtype)
            return (np.asarray(fn(x)).astype(real, copy=False),)

        return compute

    return factory


kernel("Real")(_part(np.real))
kernel("Imag")(_part(np.imag))
kernel("ComplexAbs")(_part(np.abs))
kernel("Angle")(_part(np.angle))


@kernel("Conj")
def conj(node: Node) -> Compute:
    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        return (np.conj(inputs[0]),)

    return compute
