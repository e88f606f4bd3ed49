"""Quantization: fake quantization (FakeQuantWithMinMaxArgs, FakeQuantWithMinMaxVars and its per-channel
form), QuantizeAndDequantizeV2/V3/V4, and QuantizeV2 / Dequantize.

Quantization-aware training (TF-MOT's ``quantize_model``, the older ``tf.contrib.quantize``) leaves the
FakeQuant ops in an exported SavedModel or frozen graph: each rounds a float tensor to the grid of a
``num_bits`` integer type and back. TensorFlow first nudges [min, max] so that 0.0 falls exactly on the grid;
that nudging and the float32 arithmetic below follow fake_quant_ops_functor.h step by step (Args and
PerChannel multiply by an inverse scale computed afresh, Vars divides by the scale), since a value half a
step from a grid point may round either way otherwise. ``tf.quantization.quantize_and_dequantize`` gives
the QuantizeAndDequantize ops, which compute in their own float type (float or double) as
quantize_and_dequantize_op.h does.

QuantizeV2 and Dequantize carry TensorFlow's quantized types (qint8, quint8, qint16, quint16, qint32),
which poolserve's dtypes do not map: a graph can neither feed, fetch nor hold constants of them. Inside a
graph the kernels pass such a tensor on as the numpy integer array of the same width (qint8 as int8, ...),
so a QuantizeV2 -> Dequantize pair runs, with TensorFlow's numbers.

What is not emulated, being an accident of TensorFlow's build rather than its definition: a quantized value
past the range of its integer type (QuantizeV2 to qint32 at the top of the range, where TensorFlow's
float-to-int conversion overflows to INT_MIN) saturates here; and TensorFlow flushes denormal floats to zero,
which decides QuantizeV2 SCALED to an unsigned type when max_range <= 0 (TensorFlow 0, here 1 with
narrow_range). FakeQuant with min == max is TensorFlow's: zeros when both are 0, NaN otherwise.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from poolserve.proto import types_pb2
from poolserve.runtime import dtypes
from poolserve.runtime.errors import InvalidArgumentError, UnimplementedError
from poolserve.runtime.kernels._common import _bad_attr, _dims
from poolserve.runtime.kernels.registry import Compute, OpContext, kernel
from poolserve.runtime.node import Node

_F32 = np.float32


def _clamp(x: Any, lo: Any, hi: Any) -> Any:
    """Eigen's ``cwiseMin(hi).cwiseMax(lo)``: a NaN value stays NaN, a NaN bound clamps nothing."""
    below = np.where(hi < x, hi, x)
    return np.where(lo > below, lo, below).astype(x.dtype, copy=False)


def _round_away(v: Any) -> Any:
    """std::round (and Eigen's ``round()``): half away from zero, exactly (no ``floor(v + 0.5)`` error)."""
    whole = np.trunc(v)
    return whole + np.where(np.abs(v - whole) >= 0.5, np.sign(v), 0).astype(whole.dtype)


# --- fake quantization --------------------------------------------------------------------------------------


def _quant_range(node: Node) -> tuple[int, int]:
    bits = node.attr_int("num_bits", 8)
    if not 2 <= bits <= 16:
        raise _bad_attr(node, "num_bits", "num_bits must be between 2 and 16, inclusive")
    return (1 if node.attr_bool("narrow_range", False) else 0), (1 << bits) - 1


def _nudge(lo: Any, hi: Any, qmin: int, qmax: int) -> tuple[Any, Any, Any, Any]:
    """(nudged_min, nudged_max, scale, inverse scale) in float32, arrays of the shape of ``lo``: the range
    moved so that 0.0 is a grid point (the zero point rounded half away from zero, kept within [qmin, qmax]).
    The inverse is computed afresh, not as 1 / scale, as TensorFlow does."""
    lo, hi = np.asarray(lo, _F32), np.asarray(hi, _F32)
    fmin, fmax = _F32(qmin), _F32(qmax)
    with np.errstate(divide="ignore", invalid="ignore"):
        scale = (hi - lo) / (fmax - fmin)
        inverse = (fmax - fmin) / (hi - lo)
        from_min = fmin - lo / scale
    zero = np.where(
        from_min < fmin, fmin, np.where(from_min > fmax, fmax, np.nan_to_num(_round_away(from_min)))
    )
    zero = zero.astype(_F32)
    return (fmin - zero) * scale, (fmax - zero) * scale, scale, inverse


def _fake_quant(x: Any, lo: Any, hi: Any, qmin: int, qmax: int, divide: bool = False) -> Any:
    """fake_quant_ops_functor.h: the Vars op divides by the scale, Args and PerChannel multiply by its
    inverse; a channel whose min and max are both 0 is all zeros."""
    nudged_min, nudged_max, scale, inverse = _nudge(lo, hi, qmin, qmax)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        zero = np.floor(-nudged_min * inverse + _F32(0.5))
        shifted = _clamp(x, nudged_min, nudged_max) - nudged_min
        steps = shifted / scale if divide else shifted * inverse
        out = (np.floor(steps - zero + _F32(0.5)) * scale).astype(_F32, copy=False)
    both_zero = (np.asarray(lo) == 0) & (np.asarray(hi) == 0)
    if both_zero.any():
        out = np.where(both_zero, _F32(0), out)
    return out


@kernel("FakeQuantWithMinMaxArgs")
def fake_quant_with_min_max_args(node: Node) -> Compute:
    lo, hi = node.attr_float("min", -6.0), node.attr_float("max", 6.0)
    if not _F32(lo) < _F32(hi):
        raise _bad_attr(node, "min", f"min has to be smaller than max, was: {lo:g} >= {hi:g}")
    qmin, qmax = _quant_range(node)

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        return (_fake_quant(inputs[0], lo, hi, qmin, qmax),)

    return compute


@kernel("FakeQuantWithMinMaxVars")
def fake_quant_with_min_max_vars(node: Node) -> Compute:
    qmin, qmax = _quant_range(node)

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        x, lo, hi = inputs
        for name, t in (("min", lo), ("max", hi)):
            if t.ndim:
                raise InvalidArgumentError(f"`{name}` must be rank 0 but is rank {t.ndim}")
        return (_fake_quant(x, lo, hi, qmin, qmax, divide=True),)

    return compute


@kernel("FakeQuantWithMinMaxVarsPerChannel")
def fake_quant_with_min_max_vars_per_channel(node: Node) -> Compute:
    qmin, qmax = _quant_range(node)

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        x, lo, hi = inputs
        if x.ndim < 1:  # TensorFlow's kernel aborts the process here; its shape function refuses it
            raise InvalidArgumentError(f"inputs must be at least rank 1, got shape {_dims(x.shape)}")
        depth = x.shape[-1]
        for name, t in (("min", lo), ("max", hi)):
            if t.ndim != 1:
                raise InvalidArgumentError(f"`{name}` must be rank 1 but is rank {t.ndim}")
            if t.shape[0] != depth:
                raise InvalidArgumentError(f"{name} has incorrect size, expected {depth} was {t.shape[0]}")
        return (_fake_quant(x, lo, hi, qmin, qmax),)

    return compute


# --- quantize and dequantize in one op ----------------------------------------------------------------------


def _round_half_up(v: Any) -> Any:
    return np.floor(v + v.dtype.type(0.5))


def _scale_range(lo: Any, hi: Any, signed: bool, bits: int, narrow: bool) -> tuple[Any, Any, Any, Any]:
    """ComputeQuantizationRange for each channel, in the input's float type: (min, max, scale,
    inverse_scale), the side of the range that limits the scale kept and the other moved onto the grid."""
    dt = lo.dtype.type
    qmin = (-(1 << (bits - 1)) + (1 if narrow else 0)) if signed else 0
    qmax = ((1 << (bits - 1)) - 1) if signed else (1 << bits) - 1
    fqmin, fqmax = dt(qmin), dt(qmax)
    big = dt(np.finfo(lo.dtype).max)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        from_min = np.where(fqmin * lo > 0, fqmin / lo, big).astype(lo.dtype)
        from_max = np.where(fqmax * hi > 0, fqmax / hi, big).astype(lo.dtype)
        use_min = from_min < from_max
        scale = np.where(use_min, from_min, from_max)
        inverse = np.where(use_min, lo / fqmin, hi / fqmax).astype(lo.dtype)
        new_hi = np.where(use_min, fqmax * inverse, hi).astype(lo.dtype)
        new_lo = np.where(use_min, lo, fqmin * inverse).astype(lo.dtype)
    return new_lo, new_hi, scale, inverse


def _quantize_and_dequantize(
    x: Any,
    lo_t: Any,
    hi_t: Any,
    *,
    signed: bool,
    bits: int,
    range_given: bool,
    half_to_even: bool,
    narrow: bool,
    axis: int,
    v3: bool = False,
) -> Any:
    if v3 and (x.ndim == 0 or not axis < x.ndim):
        raise InvalidArgumentError(
            f"Axis requested is larger than input dimensions. Axis: {axis} Input Dimensions: {x.ndim}"
        )
    if not v3 and axis != -1 and not axis < x.ndim:
        raise InvalidArgumentError(f"Shape must be at least rank {axis + 1} but is rank {x.ndim}")
    if not 0 < bits < (62 if signed else 63):
        raise InvalidArgumentError(f"num_bits is out of range: {bits} with signed_input_ {int(signed)}")
    depth = 1 if axis == -1 else x.shape[axis]
    # [outer, depth, inner] as TensorFlow's flat_inner_outer_dims
    inner = int(np.prod(x.shape[axis + 1 :])) if axis != -1 else x.size
    view = x.reshape(x.size // max(depth * inner, 1) if x.size else 0, depth, inner)
    if range_given:
        if not v3:  # TensorFlow 2.21's V2 and V4 take a given range only as scalars, so only with axis -1
            for name, t in (("input_min", lo_t), ("input_max", hi_t)):
                if t.ndim:
                    raise InvalidArgumentError(f"{name} must be a scalar.")
        if axis == -1:
            if lo_t.size != 1 or hi_t.size != 1:
                raise InvalidArgumentError("input_min and input_max must be scalars")
            lo_v, hi_v = lo_t.reshape(1), hi_t.reshape(1)
            if lo_v[0] > hi_v[0]:
                raise InvalidArgumentError(f"Invalid range: input_min {lo_v[0]:g} > input_max {hi_v[0]:g}")
        else:
            for name, t in (("input_min_tensor", lo_t), ("input_max_tensor", hi_t)):
                if t.ndim != 1:
                    raise InvalidArgumentError(f"Shape must be rank 1 for {name} when the axis is specified")
                if t.shape[0] != depth:
                    raise InvalidArgumentError(
                        f"{name} has incorrect size, was {t.shape[0]} expected {depth} to match dim {axis} "
                        f"of the input {_dims(x.shape)}"
                    )
            lo_v, hi_v = lo_t, hi_t
    elif view.size:
        lo_v, hi_v = view.min(axis=(0, 2)), view.max(axis=(0, 2))
    else:
        return x.copy()
    lo, hi, scale, inverse = _scale_range(
        np.asarray(lo_v, x.dtype), np.asarray(hi_v, x.dtype), signed, bits, narrow
    )
    shape = (1, depth, 1)
    lo, hi, scale, inverse = (a.reshape(shape) for a in (lo, hi, scale, inverse))
    with np.errstate(over="ignore", invalid="ignore"):
        v = _clamp(view, lo, hi) if range_given else view
        scaled = v * scale
        rounded = np.rint(scaled) if half_to_even else _round_half_up(scaled)
        return (rounded * inverse).astype(x.dtype, copy=False).reshape(x.shape)


def _qdq_attrs(node: Node) -> dict[str, Any]:
    _float_type(node)
    return {
        "signed": node.attr_bool("signed_input", True),
        "narrow": node.attr_bool("narrow_range", False),
        "axis": node.attr_int("axis", -1),
    }


def _float_type(node: Node) -> None:
    dtype = node.attr_dtype("T", types_pb2.DT_FLOAT)
    if dtype not in (np.float32, np.float64):  # TensorFlow's CPU kernels: no half
        raise _bad_attr(node, "T", f"must be float or double, got {dtype}")


@kernel("QuantizeAndDequantizeV2", "QuantizeAndDequantizeV4")
def quantize_and_dequantize_v2(node: Node) -> Compute:
    attrs = _qdq_attrs(node)
    bits = node.attr_int("num_bits", 8)
    range_given = node.attr_bool("range_given", False)
    half_to_even = node.attr_str("round_mode", "HALF_TO_EVEN", choices=("HALF_TO_EVEN", "HALF_UP")) == (
        "HALF_TO_EVEN"
    )
    if bits <= 0 or bits >= (62 if attrs["signed"] else 63):
        raise _bad_attr(
            node, "num_bits", f"num_bits is out of range: {bits} with signed_input_ {int(attrs['signed'])}"
        )

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        x, lo, hi = inputs
        return (
            _quantize_and_dequantize(
                x, lo, hi, bits=bits, range_given=range_given, half_to_even=half_to_even, **attrs
            ),
        )

    return compute


@kernel("QuantizeAndDequantizeV3")
def quantize_and_dequantize_v3(node: Node) -> Compute:
    attrs = _qdq_attrs(node)
    range_given = node.attr_bool("range_given", True)

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        x, lo, hi, bits_t = inputs
        if bits_t.ndim:
            raise InvalidArgumentError(f"num_bits must be a scalar, got shape {_dims(bits_t.shape)}")
        return (
            _quantize_and_dequantize(
                x, lo, hi, bits=int(bits_t), range_given=range_given, half_to_even=True, v3=True, **attrs
            ),
        )

    return compute


# --- QuantizeV2 and Dequantize ------------------------------------------------------------------------------

# a quantized type is held as the numpy integer type of its width
_QUANTIZED = dtypes.QUANTIZED


def _quantized_type(node: Node) -> np.dtype[Any]:
    code = node.attr("T")
    if code not in _QUANTIZED:
        raise _bad_attr(node, "T", "must be one of qint8, quint8, qint16, quint16, qint32")
    return _QUANTIZED[code]


def _to_int(v: Any, dtype: np.dtype[Any]) -> Any:
    info = np.iinfo(dtype)
    with np.errstate(invalid="ignore"):
        return np.clip(np.nan_to_num(v.astype(np.float64)), info.min, info.max).astype(dtype)


def _slices(x: Any, lo_t: Any, hi_t: Any, axis: int) -> tuple[Any, list[tuple[float, float]]]:
    """``x`` as [outer, slices, inner] and each slice's (min, max)."""
    count = x.shape[axis]
    for name, t in (("input_min_tensor", lo_t), ("input_max_tensor", hi_t)):
        if t.size != count:
            raise InvalidArgumentError(
                f"{name} must have as many elements as input on the dequantization axis ({axis}), "
                f"got {t.size}, expected {count}"
            )
    view = x.reshape(int(np.prod(x.shape[:axis])), count, int(np.prod(x.shape[axis + 1 :])))
    return view, list(zip(lo_t.ravel().tolist(), hi_t.ravel().tolist(), strict=True))


@kernel("QuantizeV2", outputs=3)
def quantize_v2(node: Node) -> Compute:
    dtype = _quantized_type(node)
    mode = node.attr_str("mode", "MIN_COMBINED", choices=("MIN_COMBINED", "MIN_FIRST", "SCALED"))
    round_mode = node.attr_str(
        "round_mode", "HALF_AWAY_FROM_ZERO", choices=("HALF_AWAY_FROM_ZERO", "HALF_TO_EVEN")
    )
    if round_mode == "HALF_TO_EVEN" and mode != "SCALED":
        raise _bad_attr(
            node,
            "round_mode",
            f"Round mode 'HALF_TO_EVEN' only supported for mode 'SCALED', but mode is '{mode}'.",
        )
    narrow = node.attr_bool("narrow_range", False)
    axis = node.attr_int("axis", -1)
    ensure = _F32(node.attr_float("ensure_minimum_range", 0.01))
    info = np.iinfo(dtype)
    signed = info.min < 0

    def adjusted(lo: Any, hi: Any) -> tuple[Any, Any]:
        if hi < lo:
            raise InvalidArgumentError("input_max_range must be larger than input_min_range.")
        new_lo = min(_F32(0), lo)
        epsilon = max(_F32(1), max(abs(lo), abs(hi))) * ensure
        return new_lo, max(_F32(0), max(hi, _F32(new_lo + epsilon)))

    def quantize(x: Any, lo: Any, hi: Any) -> tuple[Any, Any, Any]:
        lo, hi = adjusted(_F32(lo), _F32(hi))
        if mode == "MIN_FIRST":
            steps = float(1 << (8 * dtype.itemsize))
            scale = _F32(0.0 if hi == lo else (steps - 1.0) / float(_F32(hi - lo)))
            lo_scaled = _F32(_round_away(lo * scale))
            lower, upper = (
                max(_F32(info.min), _F32(-2.147483648e09)),
                min(_F32(info.max), _F32(2.147483520e09)),
            )
            q = _round_away(x * scale) - (lo_scaled - _F32(info.min))
            return np.minimum(np.maximum(q, lower), upper).astype(dtype), lo, hi
        if mode == "MIN_COMBINED":
            factor = _F32((float(info.max) - float(info.min)) / float(_F32(hi - lo)))
            shifted = (_clamp(x, lo, hi) - lo) * factor
            if signed:
                half = _F32((float(info.max) - float(info.min) + 1) / 2.0)
                return _to_int(_round_away(shifted - half), dtype), lo, hi
            return _to_int(np.trunc(shifted + _F32(0.5)), dtype), lo, hi
        qlo, qhi = info.min + (1 if narrow else 0), info.max
        big = _F32(np.finfo(_F32).max)
        from_min = _F32(qlo) / lo if qlo * lo > 0 else big
        from_max = _F32(qhi) / hi if qhi * hi > 0 else big
        factor = _F32(min(from_min, from_max))
        lo, hi = _F32(qlo) / factor, _F32(qhi) / factor
        v = _clamp(x, lo, hi) * factor
        rounded = np.rint(v) if round_mode == "HALF_TO_EVEN" else _round_away(v)
        return _to_int(rounded, dtype), lo, hi

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        x, lo_t, hi_t = inputs
        if axis != -1 and not -1 < axis < x.ndim:
            raise InvalidArgumentError(f"Axis must be less than input dimension({x.ndim}), got {axis}")
        count = 1 if axis == -1 else x.shape[axis]
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            if count == 1:
                if not lo_t.size or not hi_t.size:
                    raise InvalidArgumentError("min_range and max_range must not be empty")
                q, lo, hi = quantize(x, lo_t.ravel()[0], hi_t.ravel()[0])
                return q, np.array(lo, _F32), np.array(hi, _F32)
            if mode == "MIN_FIRST":
                raise UnimplementedError("MIN_FIRST mode is not implemented for Quantize with axis != -1.")
            view, ranges = _slices(x, lo_t, hi_t, axis)
            out = np.empty(view.shape, dtype)
            los, his = np.empty(lo_t.shape, _F32), np.empty(lo_t.shape, _F32)
            for i, (lo, hi) in enumerate(ranges):
                out[:, i], los.flat[i], his.flat[i] = quantize(view[:, i], lo, hi)
            return out.reshape(x.shape), los, his

    return compute


@kernel("Dequantize")
def dequantize(node: Node) -> Compute:
    dtype = _quantized_type(node)
    mode = node.attr_str("mode", "MIN_COMBINED", choices=("MIN_COMBINED", "MIN_FIRST", "SCALED"))
    narrow = node.attr_bool("narrow_range", False)
    axis = node.attr_int("axis", -1)
    out_type = node.attr_dtype("dtype", types_pb2.DT_FLOAT)
    if out_type != _F32:
        raise _bad_attr(node, "dtype", f"Output type must be bfloat16 or float, is '{out_type}'")
    info = np.iinfo(dtype)
    fmax, fmin = _F32(info.max), _F32(info.min)
    half = _F32((fmax - fmin + _F32(1)) / _F32(2)) if info.min < 0 else _F32(0)

    def dequantize_one(x: Any, lo: Any, hi: Any) -> Any:
        lo, hi = _F32(lo), _F32(hi)
        v = x.astype(_F32)
        if mode == "MIN_COMBINED":
            return (v + half) * ((hi - lo) / (fmax - fmin)) + lo
        if mode == "MIN_FIRST":
            steps = float(1 << (8 * dtype.itemsize))
            scale = _F32(float(hi - lo) / (steps - 1.0))
            rounded = lo if hi == lo else _F32(_round_away(lo / scale) * scale)
            return _F32(rounded - fmin * scale) + v * scale
        lowest = info.min + (1 if narrow else 0)
        factor = hi / fmax if info.min == 0 else max(lo / _F32(lowest), hi / fmax)
        return v * _F32(factor)

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        x, lo_t, hi_t = inputs
        if x.dtype != dtype:
            x = x.astype(dtype)
        if not axis < x.ndim:
            raise InvalidArgumentError(f"Axis must be less than input dimension({x.ndim}), got {axis}")
        count = 1 if axis < 0 else x.shape[axis]
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            if count == 1 or axis < 0:
                for name, t in (("input_min_tensor", lo_t), ("input_max_tensor", hi_t)):
                    if t.size != count:
                        raise InvalidArgumentError(
                            f"{name} must have as many elements as input on the dequantization axis "
                            f"({axis}), got {t.size}, expected {count}"
                        )
                return (dequantize_one(x, lo_t.ravel()[0], hi_t.ravel()[0]).astype(_F32),)
            view, ranges = _slices(x, lo_t, hi_t, axis)
            if mode == "MIN_FIRST":
                raise UnimplementedError("MIN_FIRST mode is not implemented for Dequantize with axis != -1.")
            out = np.empty(view.shape, _F32)
            for i, (lo, hi) in enumerate(ranges):
                out[:, i] = dequantize_one(view[:, i], lo, hi)
            return (out.reshape(x.shape),)

    return compute
