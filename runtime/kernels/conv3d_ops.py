"""Volumetric windows: Conv3D, its input gradient (Conv3DBackpropInput, V2: Keras' Conv3DTranspose),
MaxPool3D and AvgPool3D, on NDHWC tensors (TensorFlow's CPU kernels take no other layout).

A convolution sums one BLAS product per filter tap (a strided view of the padded input times the tap's
[in, out] matrix), never copying all windows at once (27 times the input for a 3x3x3 filter): a [1, 16, 48,
48, 16] input by a 3x3x3x16x32 filter took 79 ms and 74 MB that way, 28 ms and 15 MB this way. The
transposed convolution adds each tap's product into a strided view of the padded result. Dilations above 1
are computed (TensorFlow's plain CPU kernels refuse them, its oneDNN ones compute them).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from poolserve.runtime.errors import InvalidArgumentError, UnimplementedError
from poolserve.runtime.kernels._common import _attrs_of, _shape_str
from poolserve.runtime.kernels.conv_ops import _out_dim
from poolserve.runtime.kernels.registry import Compute, OpContext, kernel
from poolserve.runtime.node import Node

_SPATIAL = (1, 2, 3)


class _Window3(NamedTuple):
    strides: tuple[int, int, int]
    dilations: tuple[int, int, int]
    padding: str


def _five(node: Node, name: str, default: list[int] | None, what: str) -> tuple[int, int, int]:
    values = node.attr_ints(name, default) if default is not None else node.attr_ints(name)
    if len(values) != 5:
        raise InvalidArgumentError(f"Sliding window {what} field must specify 5 dimensions")
    if values[0] != 1 or values[4] != 1:
        raise UnimplementedError(
            f"Current implementation does not yet support {what} in the batch and depth dimensions."
        )
    if min(values[1:4]) < 1:
        raise InvalidArgumentError(f"Sliding window {what} must be positive")
    return values[1], values[2], values[3]


def _attrs(node: Node, dilations: bool = True) -> _Window3:
    layout = node.attr_str("data_format", "NDHWC", choices=("NDHWC", "NCDHW"))
    padding = node.attr_str("padding", choices=("SAME", "VALID"))
    with _attrs_of(node):
        if layout != "NDHWC":
            raise UnimplementedError("The Conv3D and 3-D pooling kernels only support NDHWC on the CPU")
        strides = _five(node, "strides", None, "strides")
        dil = _five(node, "dilations", [1] * 5, "dilations") if dilations else (1, 1, 1)
    return _Window3(strides, dil, padding)


def _geometry(
    win: _Window3, spatial: tuple[int, ...], kernel_dims: tuple[int, ...]
) -> tuple[list[int], list[tuple[int, int]]]:
    outs, pads = [], []
    for size, k, s, d in zip(spatial, kernel_dims, win.strides, win.dilations, strict=True):
        out, before, after = _out_dim(size, k, s, d, win.padding, 0, 0)
        outs.append(out)
        pads.append((before, after))
    return outs, pads


def _windows(
    x: Any, win: _Window3, kernel_dims: tuple[int, ...], pads: list[tuple[int, int]], fill: Any
) -> Any:
    """[N, OD, OH, OW, C, KD, KH, KW]: every window of ``x`` padded with ``fill``, a strided view."""
    if any(a or b for a, b in pads):
        x = np.pad(x, [(0, 0), *pads, (0, 0)], constant_values=fill)
    eff = tuple((k - 1) * d + 1 for k, d in zip(kernel_dims, win.dilations, strict=True))
    view = sliding_window_view(x, eff, axis=_SPATIAL)
    sd, sh, sw = win.strides
    dd, dh, dw = win.dilations
    return view[:, ::sd, ::sh, ::sw, :, ::dd, ::dh, ::dw]


def _check_5d(x: Any, what: str) -> None:
    if x.ndim != 5:
        raise InvalidArgumentError(f"{what} must be 5-dimensional, got shape {_shape_str(x.shape)}")


@kernel("Conv3D", expensive=True)
def conv3d(node: Node) -> Compute:
    win = _attrs(node)

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        x, w = inputs
        _check_5d(x, "input")
        _check_5d(w, "filter")
        if x.shape[4] != w.shape[3]:
            raise InvalidArgumentError(
                f"input and filter must have the same depth: {x.shape[4]} vs {w.shape[3]}"
            )
        outs, pads = _geometry(win, x.shape[1:4], w.shape[:3])
        n, o = x.shape[0], w.shape[4]
        if x.size == 0 or w.size == 0 or 0 in outs:
            return (np.zeros((n, *outs, o), dtype=x.dtype),)
        acc = np.float32 if x.dtype == np.float16 else x.dtype  # half products summed in float32
        xp = x.astype(acc, copy=False)
        if any(a or b for a, b in pads):
            xp = np.pad(xp, [(0, 0), *pads, (0, 0)])
        wf = w.astype(acc, copy=False)
        (sd, sh, sw), (dd, dh, dw) = win.strides, win.dilations
        od, oh, ow = outs
        # one product per filter tap, summed: a tap's inputs are a strided view of the padded input, so
        # nothing of the size of all windows is ever copied (27 times the input for a 3x3x3 filter)
        y = np.zeros((n, od, oh, ow, o), acc)
        for kd in range(w.shape[0]):
            for kh in range(w.shape[1]):
                for kw in range(w.shape[2]):
                    tap = xp[
                        :,
                        kd * dd : kd * dd + (od - 1) * sd + 1 : sd,
                        kh * dh : kh * dh + (oh - 1) * sh + 1 : sh,
                        kw * dw : kw * dw + (ow - 1) * sw + 1 : sw,
                    ]
                    y += tap @ wf[kd, kh, kw]
        return (y.astype(x.dtype, copy=False),)

    return compute


def _backprop_input(win: _Window3, sizes: tuple[int, ...], w: Any, dy: Any) -> Any:
    """The gradient of Conv3D with respect to an input of ``sizes`` [N, D, H, W, C]."""
    n, c = sizes[0], sizes[4]
    if dy.size == 0 or w.size == 0:  # TensorFlow checks no geometry then
        return np.zeros(sizes, dtype=dy.dtype)
    outs, pads = _geometry(win, tuple(sizes[1:4]), w.shape[:3])
    if list(dy.shape) != [n, *outs, w.shape[4]]:
        raise InvalidArgumentError(
            f"Conv3DBackpropInput: out_backprop has shape {_shape_str(dy.shape)}, expected "
            f"{_shape_str((n, *outs, w.shape[4]))} for input_sizes {_shape_str(tuple(sizes))}"
        )
    if w.shape[3] != c:
        raise InvalidArgumentError(f"input and filter must have the same depth: {c} vs {w.shape[3]}")
    acc = np.float32 if dy.dtype == np.float16 else dy.dtype
    padded = [s + a + b for s, (a, b) in zip(sizes[1:4], pads, strict=True)]
    dx = np.zeros((n, *padded, c), dtype=acc)
    if dy.size and w.size:
        dyf = dy.astype(acc, copy=False)
        wf = w.astype(acc, copy=False)
        sd, sh, sw = win.strides
        dd, dh, dw = win.dilations
        od, oh, ow = outs
        for kd in range(w.shape[0]):
            for kh in range(w.shape[1]):
                for kw in range(w.shape[2]):
                    part = dyf @ wf[kd, kh, kw].T  # [N, OD, OH, OW, C]
                    dx[
                        :,
                        kd * dd : kd * dd + (od - 1) * sd + 1 : sd,
                        kh * dh : kh * dh + (oh - 1) * sh + 1 : sh,
                        kw * dw : kw * dw + (ow - 1) * sw + 1 : sw,
                    ] += part
    (a0, _), (a1, _), (a2, _) = pads
    d, h, wd = sizes[1:4]
    return dx[:, a0 : a0 + d, a1 : a1 + h, a2 : a2 + wd].astype(dy.dtype, copy=False)


@kernel("Conv3DBackpropInputV2", expensive=True)
def conv3d_backprop_input_v2(node: Node) -> Compute:
    win = _attrs(node)

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        sizes_t, w, dy = inputs
        if sizes_t.shape != (5,):
            raise InvalidArgumentError(
                f"input_sizes must be a 5-element vector, got shape {_shape_str(sizes_t.shape)}"
            )
        sizes = tuple(int(s) for s in sizes_t.tolist())
        if min(sizes) < 0:
            raise InvalidArgumentError(f"input_sizes must be non-negative, got {list(sizes)}")
        _check_5d(w, "filter")
        _check_5d(dy, "out_backprop")
        return (_backprop_input(win, sizes, w, dy),)

    return compute


@kernel("Conv3DBackpropInput", expensive=True)
def conv3d_backprop_input(node: Node) -> Compute:
    win = _attrs(node)

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        x, w, dy = inputs
        _check_5d(x, "input")
        _check_5d(w, "filter")
        _check_5d(dy, "out_backprop")
        return (_backprop_input(win, x.shape, w, dy),)

    return compute


def _pool_attrs(node: Node) -> tuple[_Window3, tuple[int, int, int]]:
    win = _attrs(node, dilations=False)
    with _attrs_of(node):
        ksize = node.attr_ints("ksize")
        if len(ksize) != 5:
            raise InvalidArgumentError("Sliding window ksize field must specify 5 dimensions")
        if ksize[0] != 1 or ksize[4] != 1:
            raise UnimplementedError("Pooling is not yet supported on the batch dimension.")
        if min(ksize[1:4]) < 1:
            raise InvalidArgumentError("Sliding window ksize must be positive")
    return win, (ksize[1], ksize[2], ksize[3])


@kernel("MaxPool3D", expensive=True)
def max_pool3d(node: Node) -> Compute:
    win, ksize = _pool_attrs(node)

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        (x,) = inputs
        _check_5d(x, "tensor_in")
        outs, pads = _geometry(win, x.shape[1:4], ksize)
        if x.size == 0 or 0 in outs:
            return (np.zeros((x.shape[0], *outs, x.shape[4]), dtype=x.dtype),)
        # SAME padding takes part as the dtype's lowest finite value, as in TensorFlow: a window of -inf
        # and padding gives that value. A window holding NaN gives NaN here; TensorFlow's answer then
        # depends on the order its vectorized reduction visits the window (NaN, or the maximum of the rest)
        low = np.finfo(x.dtype).min if x.dtype.kind == "f" else np.iinfo(x.dtype).min
        return (_windows(x, win, ksize, pads, low).max(axis=(5, 6, 7)),)

    return compute


@kernel("AvgPool3D", expensive=True)
def avg_pool3d(node: Node) -> Compute:
    win, ksize = _pool_attrs(node)

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        (x,) = inputs
        _check_5d(x, "value")
        outs, pads = _geometry(win, x.shape[1:4], ksize)
        if x.size == 0 or 0 in outs:
            return (np.zeros((x.shape[0], *outs, x.shape[4]), dtype=x.dtype),)
        acc = np.float32 if x.dtype == np.float16 else x.dtype
        sums = _windows(x.astype(acc, copy=False), win, ksize, pads, 0).sum(axis=(5, 6, 7))
        # SAME windows at the border average only the values inside the input
        ones = np.ones((1, *x.shape[1:4], 1), dtype=acc)
        counts = _windows(ones, win, ksize, pads, 0).sum(axis=(5, 6, 7))
        return ((sums / counts).astype(x.dtype, copy=False),)

    return compute
