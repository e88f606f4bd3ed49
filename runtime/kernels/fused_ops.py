"""TensorFlow's fused kernels: ``_FusedConv2D``, ``_FusedDepthwiseConv2dNative``, ``_FusedMatMul`` and
``_FusedBatchMatMulV2``.

Grappler's remapper (and poolserve's ``runtime/optimizer.py``) writes them in place of a convolution or
matrix product followed by a bias and an activation. The attrs are TensorFlow's: ``fused_ops`` lists what
follows the product (``["BiasAdd"]``, ``["BiasAdd", "Relu6"]``, ``["FusedBatchNorm", "Relu"]``,
``["BiasAdd", "_MklSwish"]`` as oneDNN builds write swish, ``"HardSwish"`` (poolserve's: TensorFlow
fuses no hard swish), after a matrix product also
``"GeluExact"``/``"GeluApproximate"``), ``num_args`` counts the inputs after the
filter (1 bias, or FusedBatchNorm's scale, offset, mean and variance), ``epsilon`` is FusedBatchNorm's and
``leakyrelu_alpha`` LeakyRelu's. The product's kernel is the plain op's; bias and activation are applied in
place to its fresh output, so a fused node allocates one tensor where the unfused chain allocated three.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from poolserve.runtime.errors import InvalidArgumentError, UnimplementedError
from poolserve.runtime.kernels import nn_ops
from poolserve.runtime.kernels._common import row_sums
from poolserve.runtime.kernels.conv_ops import conv2d_with_epilogue
from poolserve.runtime.kernels.depthwise_ops import depthwise_conv2d_with_epilogue
from poolserve.runtime.kernels.erf_ops import _erf64, erfc_fn
from poolserve.runtime.kernels.math_ops import _sigmoid
from poolserve.runtime.kernels.nn_ops import _CLIP, batch_matmul, matmul
from poolserve.runtime.kernels.registry import Compute, Factory, OpContext, kernel
from poolserve.runtime.node import Node

# An activation writes its result into its argument and returns it: the banded convolutions run it on each
# band of their output and keep the band, not what the activation returns. Sigmoid and LeakyRelu with a
# slope outside (0, 1] returned a new array, so a _FusedConv2D ending in them gave its pre-activation values
# (EfficientNet's stem: Sigmoid of the swish, once the optimizer folded the swish's beta into the filter).
Activation = Callable[[Any, float], Any]
# a product kernel that runs an epilogue on its output in place: (inputs, epilogue) -> output
ProductFactory = Callable[[Node], Callable[[list[Any], Callable[[Any], Any]], Any]]

_SQRT_HALF = 0.7071067811865476
_INF = float("inf")


def _clip_bounds(act: str, dtype: np.dtype[Any]) -> tuple[Any, Any] | None:
    """(low, high) in ``dtype`` when the activation ``act`` is a clip (Relu, Relu6) of a float output."""
    bounds = {"Relu": (0.0, _INF), "Relu6": (0.0, 6.0)}.get(act)
    if bounds is None or dtype.kind != "f":
        return None
    return dtype.type(bounds[0]), dtype.type(bounds[1])


_F32 = np.dtype(np.float32)
_SQRT_2_OVER_PI = 0.7978845608028654


def _relu(y: Any, alpha: float) -> Any:
    return nn_ops._relu(y, out=y)


def _relu6(y: Any, alpha: float) -> Any:
    return nn_ops._relu6(y, out=y)


def _elu(y: Any, alpha: float) -> Any:
    neg = np.minimum(y, 0)
    np.expm1(neg, out=neg)  # expm1(0) = 0 where y > 0
    np.maximum(y, 0, out=y)
    y += neg
    return y


def _leaky_relu(y: Any, alpha: float) -> Any:
    if 0.0 < alpha <= 1.0:
        return np.maximum(y, y * y.dtype.type(alpha), out=y)
    return np.multiply(y, y.dtype.type(alpha), out=y, where=~(y > 0))


def _tanh(y: Any, alpha: float) -> Any:
    return np.tanh(y, out=y)


def _sigmoid_act(y: Any, alpha: float) -> Any:
    np.copyto(y, _sigmoid(y))
    return y


# Swish and hard swish run on blocks of 64K values, their temporary in cache, each step in place on the
# block (``_in_blocks``).
_ACT_BLOCK = 1 << 16


def _in_blocks(y: Any, step: Callable[[Any, Any], None]) -> Any:
    """``step(block, scratch)`` over ``y`` in place: on each 64K-value block of a C-contiguous ``y`` with a
    scratch array of the block's size, else once on the whole of ``y``."""
    if not y.flags.c_contiguous:
        step(y, np.empty_like(y))
        return y
    flat = y.reshape(-1)
    tmp = np.empty(min(flat.size, _ACT_BLOCK), y.dtype)
    for start in range(0, flat.size, _ACT_BLOCK):
        block = flat[start : start + _ACT_BLOCK]
        step(block, tmp[: block.size])
    return y


def _swish_step(y: Any, t: Any) -> None:
    # Swish, x * sigmoid(x) (Keras's "swish" and "silu", EfficientNet's activation), as oneDNN builds of
    # TensorFlow fuse it into a convolution (``_MklSwish``): y / (1 + exp(-y)), four passes. numpy's float32
    # exp is most of it (2-3 ns a value here): 64K values in 129 us against 216 for the graph's Mul, Sigmoid
    # and Mul (malloc tuned as a session tunes it). Below y = -88.7 exp(-y) overflows and the quotient is -0
    # (the exact value is under 1e-36 in magnitude there); -inf gives NaN, as -inf * sigmoid(-inf) does.
    np.negative(y, out=t)
    np.exp(t, out=t)
    t += 1
    np.divide(y, t, out=y)


def _hard_swish_step(y: Any, t: Any) -> None:
    # x * (relu6(x + 3) / 6) in the order Keras writes it (the same values as the graph's nodes): four
    # passes, where the graph's AddV2, Relu6, RealDiv and Mul made four nodes and three temporaries
    np.add(y, y.dtype.type(3), out=t)
    nn_ops._relu6(t, out=t)
    t /= y.dtype.type(6)
    y *= t


def _swish(y: Any, alpha: float) -> Any:
    return _in_blocks(y, _swish_step)


def _hard_swish(y: Any, alpha: float) -> Any:
    return _in_blocks(y, _hard_swish_step)


def _gelu_exact(y: Any, alpha: float) -> Any:
    if y.dtype == _F32 and y.flags.c_contiguous:
        flat = y.reshape(-1)
        for start in range(0, flat.size, _GELU_BLOCK):
            _gelu_table(flat[start : start + _GELU_BLOCK])
        return y
    # 0.5 * x * erfc(-x / sqrt(2)), the form Keras exports, with the Erfc kernel's own approximation
    e = erfc_fn(y.dtype)(y * y.dtype.type(-_SQRT_HALF))
    e *= y.dtype.type(0.5)
    y *= e
    return y


# float32 GELU as relu(x) + g(x), g(x) = x Phi(x) - relu(x) = -|x| Phi(-|x|), interpolated linearly in a
# table of g at multiples of 1/1024 over [-8, 8] (two 64 KiB tables; g is below 1e-14 past 8). It is
# within 2e-7 of the exact GELU everywhere (checked on 2 million points; the erfc form the graph spells,
# in float32 as TensorFlow computes it, is within 9e-7), and costs 11 passes over the tensor against
# about 35 for the erfc form: BERT-tiny's [128, 512] GELU 0.43 ms against 1.1-2.2 (loaded machine). It
# runs on blocks of 64K values, whose five temporaries stay in cache: at batch 8 ([1024, 512]) 5.9 ms
# against 11-16 in one piece (8.7 in 8K blocks, 7.1 in 16K, 6.4 in 32K), the erfc form 11-17.
_GELU_STEPS = 1024
_GELU_BLOCK = 1 << 16
_GELU_HALF = 8 * _GELU_STEPS


@functools.cache
def _gelu_tables() -> Any:
    """g at grid point k and g's step to k + 1 (k = -8192..8191, at index k + 8192) as float32 pairs, seen
    as one float64 each: one gather fetches both."""
    x = np.arange(-_GELU_HALF, _GELU_HALF + 1, dtype=np.float64) / _GELU_STEPS
    g = x * 0.5 * (1.0 + _erf64(x * _SQRT_HALF)) - np.maximum(x, 0.0)
    pairs = np.empty((g.size - 1, 2), np.float32)
    pairs[:, 0], pairs[:, 1] = g[:-1], np.diff(g)
    return pairs.view(np.float64).reshape(-1)


def _gelu_table(y: Any) -> Any:
    pairs = _gelu_tables()
    t = np.multiply(y, _F32.type(_GELU_STEPS))  # exact: a power of two
    _CLIP(t, _F32.type(-_GELU_HALF), _F32.type(_GELU_HALF - 1), out=t)
    whole = np.floor(t)
    t -= whole  # exact: the fraction of a step
    whole += _F32.type(_GELU_HALF)
    # int32 indices (float32 to int64 costs twice as much here, and one gather of the pairs against two
    # saves more than the strided reads below cost: 215-224 us against 237-239 for BERT-tiny's [128, 512]).
    # NaN casts to some integer: "clip" takes any index safely ("wrap" loops on a huge negative one), and
    # the fraction stays NaN
    with np.errstate(invalid="ignore"):
        index = whole.astype(np.int32)
    pair = np.take(pairs, index, mode="clip").view(_F32)
    g = np.multiply(pair[..., 1::2], t, out=t)
    g += pair[..., 0::2]
    y = nn_ops._relu(y, out=y)
    y += g
    return y


def _gelu_tanh(y: Any, alpha: float) -> Any:
    t = y * y
    t *= y.dtype.type(0.044715)
    t += 1
    t *= y
    t *= y.dtype.type(_SQRT_2_OVER_PI)
    np.tanh(t, out=t)
    t += 1
    t *= y.dtype.type(0.5)
    y *= t
    return y


ACTIVATIONS: dict[str, Activation] = {
    "Relu": _relu,
    "Relu6": _relu6,
    "Elu": _elu,
    "LeakyRelu": _leaky_relu,
    "Tanh": _tanh,
    "Sigmoid": _sigmoid_act,
    "GeluExact": _gelu_exact,
    "GeluApproximate": _gelu_tanh,
    "_MklSwish": _swish,
    "HardSwish": _hard_swish,
}
# TensorFlow's CPU kernels accept GELU only after a matrix product
_GELU = ("GeluExact", "GeluApproximate")
_MATRIX_PRODUCTS = ("_FusedMatMul", "_FusedBatchMatMulV2")


# A per-channel add over channels-last values, as ``y += bias``, runs numpy's inner loop over c values at a
# time; over the bias tiled k times it runs over k * c. Up to this many values a run (2 KiB of float32:
# runs of 4 KiB, 1024 values, met 4K aliasing and ran 2-5x slower on some shapes). Bias adds alone, best of
# 7, against the broadcast: 0.38-0.51x for 8-16 channels ([1, 48, 48, 16] 25 -> 12 us, [8, 48, 48, 16]
# 200 -> 78 us), 0.57-0.65x for 32-64, 0.81-0.95x for 96-256.
_TILE_VALUES = 512
_TILES_KEPT = 16  # output sizes a fused node keeps a tile for


def _tiled_add(y: Any, bias: Any, tiles: dict[int, Any]) -> None:
    """``y += bias`` for C-contiguous channels-last ``y`` of c = bias.size channels: over rows of the bias
    tiled k times, k the largest divisor of y's pixel count with k * c <= _TILE_VALUES (so the rows cover
    y exactly), the tile made once per size of y and kept in ``tiles``."""
    tile = tiles.get(y.size)
    if tile is None:
        c = bias.size
        pixels = y.size // c
        k = max(j for j in range(1, _TILE_VALUES // c + 1) if pixels % j == 0)
        if len(tiles) >= _TILES_KEPT:
            tiles.clear()
        tile = tiles[y.size] = np.tile(bias, k)
    rows = y.reshape(-1, tile.size)
    np.add(rows, tile, out=rows)


def _fused(product: ProductFactory, channels_first: Callable[[Node], bool]) -> Factory:
    """A fused kernel: ``product``'s kernel on (input, filter), then the epilogue ``fused_ops`` names,
    which the product runs on its fresh output in place (block by block, for large convolutions)."""

    def factory(node: Node) -> Compute:
        fused_ops = [
            s.decode("utf-8") if isinstance(s, bytes) else str(s) for s in node.attr("fused_ops", [])
        ]
        num_args = node.attr_int("num_args", 0)
        epsilon = node.attr_float("epsilon", 0.0001)
        alpha = node.attr_float("leakyrelu_alpha", 0.2)
        head, act_name = (fused_ops[0], fused_ops[1:]) if fused_ops else ("", [])
        want_args = {"BiasAdd": 1, "FusedBatchNorm": 4}.get(head)
        if (
            want_args is None
            or len(act_name) > 1
            or (act_name and act_name[0] not in ACTIVATIONS)
            or (act_name and act_name[0] in _GELU and node.op not in _MATRIX_PRODUCTS)
        ):
            raise UnimplementedError(
                f"Node '{node.name}' (op '{node.op}'): fused_ops {fused_ops} is not supported; poolserve "
                "runs BiasAdd or FusedBatchNorm, then at most one of " + ", ".join(ACTIVATIONS),
                node.name,
            )
        if num_args != want_args or len(node.inputs) != 2 + want_args:
            raise InvalidArgumentError(
                f"Node '{node.name}' (op '{node.op}'): fused_ops {fused_ops} needs num_args = {want_args} "
                f"and {2 + want_args} inputs, got num_args = {num_args} and {len(node.inputs)} inputs",
                node.name,
            )
        act = ACTIVATIONS[act_name[0]] if act_name else None
        inner = product(node)
        nchw = channels_first(node)
        # the epilogue of the last bias seen: a fused node's bias is a constant, the same array step after
        # step, and building the epilogue costs several microseconds next to a small product's ~12
        last: list[tuple[Any, Callable[[Any], Any]]] = []

        def bias_epilogue(bias: Any) -> Callable[[Any], Any]:
            if bias.ndim != 1:
                raise InvalidArgumentError(f"bias must be 1-D: {list(bias.shape)}")
            shift = bias.reshape(-1, 1, 1) if nchw else bias
            c = bias.size
            clip = _clip_bounds(act_name[0] if act_name else "", bias.dtype)
            # channels last, a constant bias (read-only: a fed one may change in place between steps):
            # added as tiled runs of up to _TILE_VALUES (see _tiled_add), per output size seen
            tiled = not nchw and not bias.flags.writeable and 0 < 2 * c <= _TILE_VALUES
            tiles: dict[int, Any] | None = {} if tiled else None

            def epilogue(y: Any) -> Any:
                if (y.shape[-3] if nchw else y.shape[-1]) != c:
                    raise InvalidArgumentError(
                        f"Must provide as many biases as the channel dimension of the output: "
                        f"[{c}] vs. {list(y.shape)}"
                    )
                if tiles is not None and y.flags.c_contiguous and y.size:
                    _tiled_add(y, shift, tiles)
                else:
                    y += shift
                if clip is not None:
                    return _CLIP(y, clip[0], clip[1], out=y)
                return y if act is None else act(y, alpha)

            return epilogue

        def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
            if head == "BiasAdd":
                bias = inputs[2]
                seen = last[0] if last else None
                if seen is not None and seen[0] is bias:
                    return (inner(inputs[:2], seen[1]),)
                epilogue = bias_epilogue(bias)
                last[:] = [(bias, epilogue)]  # holds the bias: its id cannot be reused while remembered
                return (inner(inputs[:2], epilogue),)
            scale, offset, mean, variance = inputs[2:]
            factor = scale * (1 / np.sqrt(variance + variance.dtype.type(epsilon)))
            shift = offset - mean * factor
            if nchw:
                factor, shift = factor.reshape(-1, 1, 1), shift.reshape(-1, 1, 1)
            c = inputs[2].size

            def bn_epilogue(y: Any) -> Any:
                # y: the product's fresh output, or a block of its rows (channels last)
                if (y.shape[-3] if nchw else y.shape[-1]) != c:
                    raise InvalidArgumentError(
                        f"Must provide as many biases as the channel dimension of the output: "
                        f"[{c}] vs. {list(y.shape)}"
                    )
                y *= factor
                y += shift
                return y if act is None else act(y, alpha)

            return (inner(inputs[:2], bn_epilogue),)

        return compute

    return factory


def _conv_nchw(node: Node) -> bool:
    return node.attr_str("data_format", "NHWC") == "NCHW"


def _matmul_with_epilogue(node: Node) -> Callable[[list[Any], Callable[[Any], Any]], Any]:
    inner = matmul(node)
    ctx = OpContext()  # MatMul's kernel reads nothing of its step
    return lambda inputs, epilogue: epilogue(inner(ctx, inputs)[0])


def _batch_matmul_with_epilogue(node: Node) -> Callable[[list[Any], Callable[[Any], Any]], Any]:
    """BatchMatMulV2's kernel (a [..., m, k] input times a [k, n] matrix runs as one product of all rows),
    then the epilogue on its fresh output. oneDNN builds of TensorFlow name this node ``_FusedBatchMatMulV2``
    (their fused_ops there are ``Mul`` and ``Add``; here, as ``_FusedMatMul``'s, a bias and an activation)."""
    inner = batch_matmul(node)
    ctx = OpContext()  # BatchMatMulV2's kernel reads nothing of its step
    return lambda inputs, epilogue: epilogue(inner(ctx, inputs)[0])


kernel("_FusedConv2D", expensive=True)(_fused(conv2d_with_epilogue, _conv_nchw))
kernel("_FusedDepthwiseConv2dNative", expensive=True)(_fused(depthwise_conv2d_with_epilogue, _conv_nchw))
kernel("_FusedMatMul", expensive=True)(_fused(_matmul_with_epilogue, lambda node: False))
kernel("_FusedBatchMatMulV2", expensive=True)(_fused(_batch_matmul_with_epilogue, lambda node: False))


@kernel("_FusedLayerNorm")
def fused_layer_norm(node: Node) -> Compute:
    """Layer normalization as the optimizer (``runtime/layer_norm_fusion.py``) writes it: inputs ``x``,
    ``gamma`` and ``beta`` (each broadcasting against ``x``), attrs ``axes`` (the Mean's reduction axes),
    ``epsilon`` and ``T``. It computes what the unfused graph does, ``(x - mean) * rsqrt(variance +
    epsilon) * gamma + beta`` with the mean and the variance (of ``x - mean``) taken over ``axes``, in
    ``T`` throughout, in one node where the graph had about ten."""
    axes_attr = tuple(node.attr_ints("axes"))
    dtype = node.attr_dtype("T", np.float32)
    epsilon = dtype.type(node.attr_float("epsilon"))
    if dtype not in (np.float32, np.float64):
        raise UnimplementedError(
            f"Node '{node.name}' (op '{node.op}'): T = {dtype} is not supported", node.name
        )

    # per input shape: the normalized axes, their element count, whether gamma and beta keep x's shape, and
    # whether the normalization is over the last axis alone (its rows are summed by ``row_sums``)
    shapes: dict[tuple[tuple[int, ...], ...], tuple[tuple[int, ...], Any, bool, bool, bool]] = {}

    def plan(x: Any, gamma: Any, beta: Any) -> tuple[tuple[int, ...], Any, bool, bool, bool]:
        for a in axes_attr:
            if not -x.ndim <= a < x.ndim:
                raise InvalidArgumentError(
                    f"Invalid reduction dimension ({a} for input with {x.ndim} dimension(s)"
                )
        axes = tuple(sorted({a % x.ndim for a in axes_attr}))
        count = dtype.type(math.prod(x.shape[a] for a in axes))
        if len(shapes) >= 16:
            shapes.clear()
        last = x.ndim > 0 and axes == (x.ndim - 1,)
        return axes, count, _broadcasts_into(gamma, x), _broadcasts_into(beta, x), last

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        x, gamma, beta = inputs
        if x.dtype != dtype:
            raise InvalidArgumentError(f"x must be {dtype}, got {x.dtype}")
        key = (x.shape, gamma.shape, beta.shape)
        p = shapes.get(key)
        if p is None:
            p = shapes[key] = plan(x, gamma, beta)
        axes, count, gamma_in_place, beta_in_place, last = p
        mean = row_sums(x) if last else np.add.reduce(x, axis=axes, dtype=dtype, keepdims=True)
        mean /= count
        y = np.subtract(x, mean)
        squares = np.multiply(y, y)
        var = row_sums(squares) if last else np.add.reduce(squares, axis=axes, dtype=dtype, keepdims=True)
        var /= count
        var += epsilon
        np.reciprocal(np.sqrt(var, out=var), out=var)
        y *= var
        y = np.multiply(y, gamma, out=y if gamma_in_place else None)
        return (np.add(y, beta, out=y if beta_in_place else None),)

    return compute


def _broadcasts_into(a: Any, y: Any) -> bool:
    """Whether ``y op a`` has ``y``'s shape, so the result may go to ``y``."""
    return a.ndim <= y.ndim and all(d in (1, e) for d, e in zip(a.shape[::-1], y.shape[::-1], strict=False))
