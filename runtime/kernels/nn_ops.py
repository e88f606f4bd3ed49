"""Neural-network ops: matrix products, einsum, bias, activations, softmax, normalization.

Half-precision products are computed in float32 and rounded once, as TensorFlow's CPU kernels do.
Convolutions and pooling are in ``conv_ops``.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from poolserve.runtime.errors import InvalidArgumentError
from poolserve.runtime.kernels import _half
from poolserve.runtime.kernels._common import (
    _F16,
    _F32,
    _PLAN_CACHE_SIZE,
    _attrs_of,
    _dims,
    _matmul,
    _ones_column,
    _reduce_taps,
    _widen,
    row_sums,
)
from poolserve.runtime.kernels.registry import Compute, OpContext, kernel
from poolserve.runtime.node import Node

# --- matrix products ---------------------------------------------------------------------------------------


def _size_incompatible(a: Any, b: Any) -> InvalidArgumentError:
    return InvalidArgumentError(f"Matrix size-incompatible: In[0]: {_dims(a.shape)}, In[1]: {_dims(b.shape)}")


@kernel("MatMul", expensive=True)
def matmul(node: Node) -> Compute:
    ta = node.attr_bool("transpose_a", False)
    tb = node.attr_bool("transpose_b", False)

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        a, b = inputs
        for i, m in enumerate(inputs):
            if m.ndim != 2:
                raise InvalidArgumentError(f"In[{i}] is not a matrix. Instead it has shape {_dims(m.shape)}")
        if a.shape[0 if ta else 1] != b.shape[1 if tb else 0]:
            raise _size_incompatible(a, b)
        if a.dtype == _F16:
            return (np.matmul(a.T if ta else a, b.T if tb else b, dtype=_F32).astype(_F16),)
        return (_matmul(a.T if ta else a, b.T if tb else b),)

    return compute


def _adjoint(m: Any) -> Any:
    t = np.swapaxes(m, -1, -2)
    return np.conj(t) if m.dtype.kind == "c" else t


@kernel("BatchMatMul", "BatchMatMulV2", "BatchMatMulV3", expensive=True)
def batch_matmul(node: Node) -> Compute:
    adj_x = node.attr_bool("adj_x", False)
    adj_y = node.attr_bool("adj_y", False)
    broadcast = node.op != "BatchMatMul"
    tout = node.attr_dtype("Tout") if node.op == "BatchMatMulV3" else None

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        x, y = inputs
        for i, m in enumerate(inputs):
            if m.ndim < 2:
                raise InvalidArgumentError(f"In[{i}] ndims must be >= 2: {m.ndim}")
        if x.shape[:-2] != y.shape[:-2] and not (broadcast and (x.ndim == 2 or y.ndim == 2)):
            # a matrix broadcasts against any batch (Tensordot's and EinsumDense's [..., m, k] @ [k, n]):
            # the check cost ~8 us a call, a tenth of BERT-tiny's [1, 128, 128] @ [128, 128]
            _check_batch_dims(x, y, broadcast)
        if x.shape[-2 if adj_x else -1] != y.shape[-1 if adj_y else -2]:
            raise _size_incompatible(x, y)
        if tout is not None and (x.dtype != tout or y.dtype != tout):
            x, y = x.astype(tout), y.astype(tout)
        if adj_x:
            x = _adjoint(x)
        if adj_y:
            y = _adjoint(y)
        if x.dtype == _F16:
            return (np.matmul(x, y, dtype=_F32).astype(_F16),)
        if y.ndim == 2 and x.ndim > 2 and x.flags.c_contiguous and x.size:
            # [..., m, k] @ [k, n] as one product of all rows (Tensordot's, EinsumDense's): numpy would
            # call BLAS once per leading index
            return (_matmul(x.reshape(-1, x.shape[-1]), y).reshape(*x.shape[:-1], y.shape[-1]),)
        return (_matmul(x, y),)

    return compute


def _check_batch_dims(x: Any, y: Any, broadcast: bool) -> None:
    if not broadcast:
        if x.ndim != y.ndim:
            xs, ys = _dims(x.shape), _dims(y.shape)
            raise InvalidArgumentError(f"In[0] and In[1] has different ndims: {xs} vs. {ys}")
        for i in range(x.ndim - 2):
            if x.shape[i] != y.shape[i]:
                xs, ys = _dims(x.shape), _dims(y.shape)
                raise InvalidArgumentError(
                    f"In[0].dim({i}) and In[1].dim({i}) must be the same: {xs} vs {ys}"
                )
        return
    for d, e in zip(x.shape[-3::-1], y.shape[-3::-1], strict=False):
        if d != e and d != 1 and e != 1:
            xs, ys = _dims(x.shape), _dims(y.shape)
            raise InvalidArgumentError(
                f"In[0] and In[1] must have compatible batch dimensions: {xs} vs. {ys}"
            )


class _EinsumPlan(NamedTuple):
    """How to run a two-operand einsum for given input shapes as one (batched) matmul."""

    pre: tuple[tuple[list[int], list[int]] | None, tuple[list[int], list[int]] | None]
    perm_a: tuple[int, ...] | None
    shape_a: tuple[int, ...]
    perm_b: tuple[int, ...] | None
    shape_b: tuple[int, ...]
    shape_r: tuple[int, ...]
    perm_r: tuple[int, ...] | None


def _parse_subscripts(equation: str, sub: str) -> list[str]:
    """Labels of one subscript; ``"..."`` becomes one ``"."`` entry."""
    if sub.count("...") > 1 or sub.replace("...", "").count("."):
        raise InvalidArgumentError(f"Invalid ellipsis in einsum equation '{equation}': '{sub}'")
    labels: list[str] = []
    for part in sub.split("..."):
        for ch in part:
            if not ch.isascii() or not ch.isalpha():
                raise InvalidArgumentError(f"Invalid character '{ch}' in einsum equation '{equation}'")
        labels.extend(part)
        labels.append(".")
    return labels[:-1]


def _expand_labels(labels: list[str], ndim: int, index: int, ell_rank: int) -> list[str]:
    """Replaces the ellipsis by one label per broadcast dim ("0", "1", ... aligned to the right)."""
    if "." not in labels:
        if ndim != len(labels):
            raise InvalidArgumentError(f"Expected input {index} to have rank {len(labels)} but got: {ndim}")
        return labels
    mine = ndim - len(labels) + 1
    if mine < 0:
        raise InvalidArgumentError(
            f"Expected input {index} to have rank at least {len(labels) - 1} but got: {ndim}"
        )
    at = labels.index(".")
    return labels[:at] + [str(i) for i in range(ell_rank - mine, ell_rank)] + labels[at + 1 :]


def _einsum_sizes(ops: list[list[str]], shapes: list[tuple[int, ...]]) -> dict[str, int]:
    sizes: dict[str, int] = {}
    for labels, shape in zip(ops, shapes, strict=True):
        for axis, (label, dim) in enumerate(zip(labels, shape, strict=True)):
            known = sizes.setdefault(label, dim)
            if known == dim:
                continue
            if not label.isdigit():
                raise InvalidArgumentError(
                    f"Expected dimension {known} at axis {axis} of the input shaped {_dims(shape)} "
                    f"but got dimension {dim}"
                )
            if known != 1 and dim != 1:
                raise InvalidArgumentError(
                    f"Invalid broadcasting dimensions: {' vs. '.join(_dims(s) for s in shapes)}"
                )
            sizes[label] = dim if known == 1 else known  # 1 broadcasts against 0 too
    return sizes


def _perm(current: list[str], wanted: list[str]) -> tuple[int, ...] | None:
    perm = tuple(current.index(label) for label in wanted)
    return None if perm == tuple(range(len(perm))) else perm


def _einsum_plan(
    ins: list[list[str]], out: list[str], shapes: list[tuple[int, ...]]
) -> tuple[list[list[str]], list[str], _EinsumPlan | None]:
    """Expands ellipses and checks dims; for two operands also plans the matmul."""
    ell = max(
        (len(shape) - len(labels) + 1 for labels, shape in zip(ins, shapes, strict=True) if "." in labels),
        default=0,
    )
    ops = [
        _expand_labels(labels, len(s), i, ell) for i, (labels, s) in enumerate(zip(ins, shapes, strict=True))
    ]
    if "." in out:
        at = out.index(".")
        out = out[:at] + [str(i) for i in range(ell)] + out[at + 1 :]
    elif ell:
        raise InvalidArgumentError(
            f"Output contains {ell} broadcasting dimension(s) but no ellipsis (...) was found in the output "
            "subscripts."
        )
    sizes = _einsum_sizes(ops, shapes)
    if len(ops) == 1:
        return ops, out, None

    # Diagonals and labels found in one operand only (and not in the output) are reduced away first.
    kept: list[list[str]] = []
    pre: list[tuple[list[int], list[int]] | None] = []
    for labels, other in ((ops[0], ops[1]), (ops[1], ops[0])):
        keep = [lb for i, lb in enumerate(labels) if lb not in labels[:i] and (lb in out or lb in other)]
        if keep == labels:
            pre.append(None)
        else:
            ids = {lb: i for i, lb in enumerate(dict.fromkeys(labels))}
            pre.append(([ids[lb] for lb in labels], [ids[lb] for lb in keep]))
        kept.append(keep)
    la, lb_ = kept
    batch = [x for x in out if x in la and x in lb_]
    free_a = [x for x in out if x in la and x not in lb_]
    free_b = [x for x in out if x in lb_ and x not in la]
    contract = [x for x in la if x in lb_ and x not in out]
    csize = int(np.prod([sizes[x] for x in contract]))

    # The batch dims keep the operand's own (possibly 1) sizes so that np.matmul broadcasts them.
    def batch_dims(i: int) -> tuple[int, ...]:
        labels, shape = ops[i], shapes[i]
        return tuple(shape[labels.index(x)] if x in labels else 1 for x in batch)

    fa = int(np.prod([sizes[x] for x in free_a]))
    fb = int(np.prod([sizes[x] for x in free_b]))
    natural = batch + free_a + free_b
    plan = _EinsumPlan(
        pre=(pre[0], pre[1]),
        perm_a=_perm(la, batch + free_a + contract),
        shape_a=(*batch_dims(0), fa, csize),
        perm_b=_perm(lb_, batch + contract + free_b),
        shape_b=(*batch_dims(1), csize, fb),
        shape_r=(*(sizes[x] for x in batch), *(sizes[x] for x in free_a), *(sizes[x] for x in free_b)),
        perm_r=_perm(natural, out),
    )
    return ops, out, plan


def _run_einsum_plan(plan: _EinsumPlan, a: Any, b: Any) -> Any:
    operands = []
    for x, pre, perm, shape in (
        (a, plan.pre[0], plan.perm_a, plan.shape_a),
        (b, plan.pre[1], plan.perm_b, plan.shape_b),
    ):
        if pre is not None:
            x = np.einsum(x, pre[0], pre[1])
        if perm is not None:
            x = x.transpose(perm)
        operands.append(x.reshape(shape))
    r = _matmul(operands[0], operands[1]).reshape(plan.shape_r)
    return r if plan.perm_r is None else r.transpose(plan.perm_r)


@kernel("Einsum", expensive=True)
def einsum(node: Node) -> Compute:
    equation = node.attr_str("equation")
    with _attrs_of(node):
        if equation.count("->") != 1:
            raise InvalidArgumentError(f"Expecting exactly one '->' in einsum equation: {equation}")
        lhs, rhs = equation.split("->")
        subs = lhs.split(",")
        if len(subs) not in (1, 2):
            raise InvalidArgumentError(
                f"Expecting 1 or 2 input subscripts in equation '{equation}' but got: {len(subs)}"
            )
        if len(subs) != len(node.inputs):
            raise InvalidArgumentError(
                f"Einsum equation '{equation}' has {len(subs)} operands, got {len(node.inputs)}"
            )
        ins = [_parse_subscripts(equation, s) for s in subs]
        out = _parse_subscripts(equation, rhs)
        for label in out:
            if not any(label in labels for labels in ins):
                raise InvalidArgumentError(
                    f"Output subscript '{label}' does not appear in the inputs of '{equation}'"
                )
    # A label repeated in the output ('i->ii') puts the result on that diagonal, zeros elsewhere.
    diagonal = out if len(set(out)) != len(out) else None
    out = list(dict.fromkeys(out))
    plans: dict[tuple[tuple[int, ...], ...], tuple[list[list[str]], list[str], _EinsumPlan | None]] = {}

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        key = tuple(x.shape for x in inputs)
        entry = plans.get(key)
        if entry is None:
            entry = _einsum_plan(ins, out, list(key))
            if len(plans) >= _PLAN_CACHE_SIZE:
                plans.clear()
            plans[key] = entry
        ops, out_labels, plan = entry
        half, xs = _widen(*inputs)
        if plan is None:
            ids = {label: i for i, label in enumerate(dict.fromkeys(ops[0] + out_labels))}
            r = np.einsum(xs[0], [ids[x] for x in ops[0]], [ids[x] for x in out_labels])
        else:
            r = _run_einsum_plan(plan, xs[0], xs[1])
        if diagonal is not None:
            r = _on_diagonal(r, out_labels, diagonal)
        return (r.astype(_F16) if half else np.asarray(r),)

    return compute


def _on_diagonal(r: Any, labels: list[str], wanted: list[str]) -> Any:
    """``r``, whose axes are ``labels``, written on the diagonals of a zero array whose axes are ``wanted``
    (labels repeated; "." for the ellipsis's dims, the digit labels of ``labels``)."""
    full: list[str] = []
    for label in wanted:
        full.extend([x for x in labels if x.isdigit()] if label == "." else [label])
    size = dict(zip(labels, r.shape, strict=True))
    out = np.zeros([size[x] for x in full], r.dtype)
    if out.size:
        strides = [sum(s for x, s in zip(full, out.strides, strict=True) if x == label) for label in labels]
        np.ndarray(r.shape, r.dtype, out, 0, strides)[...] = r
    return out


# --- bias and activations ----------------------------------------------------------------------------------


@kernel("BiasAdd", "BiasAddV1")
def bias_add(node: Node) -> Compute:
    nchw = node.op == "BiasAdd" and node.attr_str("data_format", "NHWC", choices=("NHWC", "NCHW")) == "NCHW"

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        x, bias = inputs
        if x.ndim < 2:
            raise InvalidArgumentError(f"Input tensor must be at least 2D: {_dims(x.shape)}")
        if bias.ndim != 1:
            raise InvalidArgumentError(f"Biases must be 1D: {_dims(bias.shape)}")
        axis = 1 if nchw else x.ndim - 1
        if x.shape[axis] != bias.shape[0]:
            where = "channel" if nchw and x.ndim > 2 else "last"
            raise InvalidArgumentError(
                f"Must provide as many biases as the {where} dimension of the input tensor: "
                f"{_dims(bias.shape)} vs. {_dims(x.shape)}"
            )
        if axis != x.ndim - 1:
            bias = bias.reshape(bias.shape[0], *([1] * (x.ndim - 2)))
        return (np.add(x, bias),)

    return compute


def _activation(fn: Any) -> Any:
    def factory(node: Node) -> Compute:
        def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
            return (fn(inputs[0]),)

        return compute

    return factory


# np.clip, not np.maximum/np.minimum: numpy 2.4's float maximum takes 1.2 ns an element against clip's
# 0.3 ns ([2304, 48] float32: 131 us against 31 us for both bounds), with the same NaN propagation; and
# like TensorFlow's max(x, 0), clip keeps -0.0. np.clip itself is Python that checks its arguments before
# calling the ufunc below (5-6 us a call, measured on MobileNetV2's 35 Relu6: 9.3 against 3.6 us on
# [3, 3, 336], 14.3 against 8.9 on [24, 24, 48]); the kernels call the ufunc with bounds of x's type.
_CLIP: Any = np._core.umath.clip if hasattr(np, "_core") else np.core.umath.clip  # type: ignore[attr-defined]


def _relu(x: Any, out: Any = None) -> Any:
    if x.dtype.kind == "f":
        return _CLIP(x, x.dtype.type(0), x.dtype.type(np.inf), out=out)
    return np.maximum(x, 0, out=out)


def _relu6(x: Any, out: Any = None) -> Any:
    t = x.dtype.type
    return _CLIP(x, t(0), t(6), out=out)


def _elu(x: Any) -> Any:
    if x.dtype == _F16:
        return _half.elu(x)
    return np.where(x > 0, x, np.expm1(x))


_SELU_SCALE = 1.0507009873554804934193349852946
_SELU_ALPHA = 1.6732632423543772848170429916717


def _selu(x: Any) -> Any:
    if x.dtype == _F16:
        return _half.selu(x)
    return np.where(x > 0, x * _SELU_SCALE, np.expm1(x) * (_SELU_SCALE * _SELU_ALPHA))


def _softplus(x: Any) -> Any:
    if x.dtype == _F16:
        return _half.softplus(x)
    # log(1 + e^x) without overflow; matches TensorFlow's thresholded form to float precision.
    return np.logaddexp(x, x.dtype.type(0))


def _softsign(x: Any) -> Any:
    return x / (np.abs(x) + 1)


kernel("Relu")(_activation(_relu))
kernel("Relu6")(_activation(_relu6))
kernel("Elu")(_activation(_elu))
kernel("Selu")(_activation(_selu))
kernel("Softplus")(_activation(_softplus))
kernel("Softsign")(_activation(_softsign))


@kernel("LeakyRelu")
def leaky_relu(node: Node) -> Compute:
    alpha = node.attr_float("alpha", 0.2)
    # alpha in each float type, as TensorFlow's kernel holds it, and whether max(x, alpha * x) equals
    # the select (x > 0 ? x : alpha * x), NaN included: for 0 < alpha <= 1 in that type (an alpha that
    # rounds to 0, 1e-8 in half, is excluded: 0 * inf is NaN).
    typed = {}
    with np.errstate(over="ignore"):  # an alpha past the type's range is infinite there, as in TF
        for t in (np.float16, np.float32, np.float64):
            a = t(alpha)
            typed[np.dtype(t)] = (a, bool(0.0 < a <= 1.0))

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        x = inputs[0]
        a, use_max = typed.get(x.dtype) or (x.dtype.type(alpha), False)
        y = np.multiply(x, a)
        if use_max and x.ndim:  # (a 0-d x gives a numpy scalar, which takes no out=)
            return (np.maximum(x, y, out=y),)
        return (np.where(x > 0, x, y),)

    return compute


@kernel("Softmax", "LogSoftmax", expensive=True)
def softmax(node: Node) -> Compute:
    log = node.op == "LogSoftmax"

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        x = inputs[0]
        if x.ndim < 1:
            raise InvalidArgumentError(f"logits must have >= 1 dimension, got {_dims(x.shape)}")
        if x.size == 0:
            return (np.empty_like(x),)
        if x.dtype == _F16:
            return (_half.softmax(x, log),)
        half, (xs,) = _widen(x)
        y = xs - xs.max(axis=-1, keepdims=True)
        if log:
            y -= np.log(row_sums(np.exp(y)))
        else:
            np.exp(y, out=y)
            y /= row_sums(y)
        return (y.astype(_F16) if half else y,)

    return compute


# --- normalization -----------------------------------------------------------------------------------------


def _check_batch_norm(x: Any, params: tuple[tuple[str, Any], ...], axis: int, when: str = "") -> int:
    """The channel count of ``x``, after TensorFlow's checks of ``x`` and the 1-D parameters: ``params``
    (name, value) must each hold one value per channel; ``when`` prefixes those checks' messages."""
    if x.ndim not in (4, 5):
        raise InvalidArgumentError(f"input must be 4 or 5-dimensional{_dims(x.shape)}")
    c: int = x.shape[axis]
    for name, p in params:
        if p.ndim != 1:
            raise InvalidArgumentError(f"{name} must be 1-dimensional{_dims(p.shape)}")
        if p.shape[0] != c and (name in ("scale", "offset") or when):
            prefix = when if name in ("mean", "variance") else ""
            raise InvalidArgumentError(
                f"{prefix}{name} must have the same number of elements as the channels of x, "
                f"got {p.shape[0]} and {c}"
            )
    return c


def _fused_batch_norm(node: Node) -> Compute:
    epsilon = node.attr_float("epsilon", 0.0001)
    channels_first = node.attr_str(
        "data_format", "NHWC", choices=("NHWC", "NCHW", "NDHWC", "NCDHW")
    ).startswith("NC")
    v3 = node.op == "FusedBatchNormV3"
    if node.attr_bool("is_training", True):
        return _batch_norm_training(node, epsilon, channels_first, v3)

    def compute(ctx: OpContext, inputs: list[Any]) -> list[Any]:
        x, scale, offset, mean, variance = inputs
        axis = 1 if channels_first else x.ndim - 1
        params = (("scale", scale), ("offset", offset), ("mean", mean), ("variance", variance))
        c = _check_batch_norm(x, params, axis, "When is_training=false, ")
        half, (xs,) = _widen(x)
        factor = scale * (1 / np.sqrt(variance + variance.dtype.type(epsilon)))
        shape = (c,) + (1,) * (x.ndim - 2) if channels_first else (c,)
        y = np.subtract(xs, mean.reshape(shape), dtype=factor.dtype)
        y *= factor.reshape(shape)
        y += offset.reshape(shape)
        if half:
            y = y.astype(_F16)
        if x.size == 0:
            # TensorFlow reports NaN batch statistics for an empty batch, its reserve spaces unset (oneDNN: 0)
            nan = np.full(c, np.nan, factor.dtype)
            outs = [y, nan, nan, np.zeros(c, factor.dtype), np.zeros(c, factor.dtype)]
            return outs + [_reserve_space_3(x)] if v3 else outs
        outs = [y, mean, variance, mean, variance]
        if v3:
            outs.append(_reserve_space_3(x))
        return outs

    return compute


def _reserve_space_3(x: Any) -> Any:
    # TensorFlow's default (oneDNN) CPU kernels give [0] for 4-D input; its Eigen kernels, which alone take
    # 5-D input, give a scalar
    return np.zeros((0,) if x.ndim == 4 else (), _F32)


def _sums_of_channel_rows(a: Any) -> Any:
    """Per-channel sums of ``[N, C, rest]`` values, as a (C, 1) column: each channel's values are rows."""
    sums = row_sums(a)
    return sums[0] if a.shape[0] == 1 else sums.sum(axis=0)


def _sums_of_channel_columns(a: Any) -> Any:
    """Per-channel sums of ``[rest, C]`` values, as a (1, C) row, by BLAS: numpy's column sums add row after
    row (a [25088, 64] batch at one BLAS thread on this project's machine: 0.71 ms against 0.26, and 7.3e-6
    against 2.0e-6 from the float64 sums)."""
    return np.matmul(_ones_column(a.shape[0], _F32).T, a)


def _batch_norm_training(node: Node, epsilon: float, channels_first: bool, v3: bool) -> Compute:
    """``is_training=true``: ``x`` normalized by its own per-channel mean and biased variance over N, H, W
    (and D). Outputs, as TensorFlow's CPU kernels give them in float32: ``batch_mean``, and
    ``batch_variance`` Bessel-corrected (``n / (n - 1)``, ``n`` the values per channel; 0 when ``n`` is 1);
    with ``exponential_avg_factor`` f != 1 these become ``(1 - f) * mean + f * batch_mean`` and
    ``(1 - f) * variance + f * corrected batch variance`` of the given ``mean`` and ``variance`` (which f = 1
    ignores: Keras passes them empty). ``reserve_space_1`` and ``_2`` are the batch mean and the biased
    variance. Keras 2 (tf_keras) writes LayerNormalization this way: its input reshaped to
    ``[1, rows, features, 1]``, NCHW, one channel per row."""
    factor = node.attr_float("exponential_avg_factor", 1.0)
    running = factor != 1.0
    channel_sums = _sums_of_channel_rows if channels_first else _sums_of_channel_columns
    eps = _F32.type(epsilon)
    keep, take = _F32.type(1.0 - factor), _F32.type(factor)
    when = "When exponential_avg_factor != 1, " if running else ""

    def compute(ctx: OpContext, inputs: list[Any]) -> list[Any]:
        x, scale, offset, mean, variance = inputs
        axis = 1 if channels_first else x.ndim - 1
        params = (("scale", scale), ("offset", offset), ("mean", mean), ("variance", variance))
        c = _check_batch_norm(x, params, axis, when)
        if x.size == 0:
            # TensorFlow's batch statistics of an empty batch are NaN, its reserve spaces unset (oneDNN: 0)
            nan = np.full(c, np.nan, _F32)
            outs = [np.empty(x.shape, x.dtype), nan, nan, np.zeros(c, _F32), np.zeros(c, _F32)]
            return outs + [_reserve_space_3(x)] if v3 else outs
        half, (xs,) = _widen(x)
        if xs.dtype != _F32:
            xs = xs.astype(_F32)
        n = x.size // c
        inv_n = _F32.type(1) / _F32.type(n)
        rows = xs.reshape(x.shape[0], c, -1) if channels_first else xs.reshape(-1, c)
        batch_mean = channel_sums(rows)
        batch_mean *= inv_n
        centered = np.subtract(rows, batch_mean)
        batch_var = channel_sums(np.square(centered))
        batch_var *= inv_n
        shape = batch_mean.shape
        scaling = np.sqrt(batch_var + eps)
        np.divide(scale.reshape(shape), scaling, out=scaling)
        centered *= scaling
        centered += offset.reshape(shape)
        y = centered.reshape(x.shape)
        if half:
            y = y.astype(_F16)
        saved_mean, saved_var = batch_mean.reshape(c), batch_var.reshape(c)
        corrected = saved_var * (_F32.type(n) / _F32.type(max(n - 1, 1)))
        if running:
            out_mean = keep * mean.astype(_F32, copy=False) + take * saved_mean
            out_var = keep * variance.astype(_F32, copy=False) + take * corrected
        else:
            out_mean, out_var = saved_mean, corrected
        outs = [y, out_mean, out_var, saved_mean, saved_var]
        return outs + [_reserve_space_3(x)] if v3 else outs

    return compute


kernel("FusedBatchNorm", "FusedBatchNormV2", expensive=True, outputs=5)(_fused_batch_norm)
kernel("FusedBatchNormV3", expensive=True, outputs=6)(_fused_batch_norm)


@kernel("LRN", expensive=True)
def lrn(node: Node) -> Compute:
    radius = node.attr_int("depth_radius", 5)
    bias = node.attr_float("bias", 1.0)
    alpha = node.attr_float("alpha", 1.0)
    beta = node.attr_float("beta", 0.5)

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        x = inputs[0]
        if x.ndim != 4:
            raise InvalidArgumentError(f"in must be 4-dimensional: {_dims(x.shape)}")
        half, (xs,) = _widen(x)
        c = xs.shape[3]
        sq = np.square(xs)
        padded = np.pad(sq, ((0, 0), (0, 0), (0, 0), (radius, radius))) if radius else sq
        window = _reduce_taps(padded, 3, 2 * radius + 1, c, 1, np.add) if c else sq
        y = xs / (bias + alpha * window) ** beta
        return (y.astype(_F16) if half else y,)

    return compute


@kernel("BatchNormWithGlobalNormalization", expensive=True)
def batch_norm_with_global_normalization(node: Node) -> Compute:
    """TF1's batch norm before FusedBatchNorm (removed in GraphDef version 9; frozen graphs of 2015, such as
    Inception's classify_image_graph_def.pb, still hold it): ``(t - m) / sqrt(v + eps) * gamma + beta``,
    gamma only when ``scale_after_normalization``. TensorFlow reads past a parameter shorter than the
    depth (garbage); poolserve refuses it."""
    epsilon = node.attr_float("variance_epsilon")
    scaled = node.attr_bool("scale_after_normalization")

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        t, m, v, beta, gamma = inputs
        if t.ndim != 4:
            raise InvalidArgumentError(f"input must be 4-dimensional{_dims(t.shape)}")
        for name, p in (("mean", m), ("var", v), ("beta", beta), ("gamma", gamma)):
            if p.ndim != 1:
                raise InvalidArgumentError(f"{name} must be 1-dimensional{_dims(p.shape)}")
            if p.shape[0] != t.shape[3]:
                raise InvalidArgumentError(
                    f"{name} must have the same number of elements as the depth of input, "
                    f"got {p.shape[0]} and {t.shape[3]}"
                )
        half, (ts, ms, vs, bs, gs) = _widen(t, m, v, beta, gamma)
        factor = 1 / np.sqrt(vs + vs.dtype.type(epsilon))
        if scaled:
            factor = factor * gs
        y = (ts - ms) * factor + bs
        return (y.astype(_F16) if half else y,)

    return compute


# --- losses ------------------------------------------------------------------------------------------------


@kernel("L2Loss")
def l2_loss(node: Node) -> Compute:
    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        t = inputs[0]
        with np.errstate(over="ignore"):  # half squares past 65504 are inf, as in TensorFlow
            halves = np.square(t) * t.dtype.type(0.5)
        if t.dtype == _F16:  # the halves are summed in float32
            return (np.asarray(np.sum(halves, dtype=_F32), _F16),)
        return (np.asarray(np.sum(halves), t.dtype),)

    return compute


def _log_softmax(logits: Any) -> tuple[Any, Any]:
    """Each row's ``-log(softmax)`` and softmax, TensorFlow's way: logits shifted by their maximum."""
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        shifted = logits - np.max(logits, axis=1, keepdims=True)
        e = np.exp(shifted)
        total = np.sum(e, axis=1, keepdims=True)
        return np.log(total) - shifted, e / total


@kernel("SoftmaxCrossEntropyWithLogits", expensive=True, outputs=2)
def softmax_cross_entropy(node: Node) -> Compute:
    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        features, labels = inputs
        try:
            shape = np.broadcast_shapes(features.shape, labels.shape)
        except ValueError:
            raise InvalidArgumentError(
                f"logits and labels must be broadcastable: logits_size={_dims(features.shape)} "
                f"labels_size={_dims(labels.shape)}"
            ) from None
        if len(shape) != 2:
            raise InvalidArgumentError(
                "logits and labels must be either 2-dimensional, or broadcasted to be 2-dimensional"
            )
        half, (f, y) = _widen(features, labels)
        if shape[1] == 0:  # no classes: no loss
            return np.zeros(shape[0], features.dtype), np.zeros(shape, features.dtype)
        y = np.broadcast_to(y, shape)
        neg_log, softmax = _log_softmax(np.broadcast_to(f, shape))
        with np.errstate(invalid="ignore"):  # a zero label on a -inf logit: NaN, as TensorFlow gives
            loss = np.sum(y * neg_log, axis=1)
        backprop = softmax - y
        if half:
            return loss.astype(_F16), backprop.astype(_F16)
        return loss, backprop

    return compute


@kernel("SparseSoftmaxCrossEntropyWithLogits", expensive=True, outputs=2)
def sparse_softmax_cross_entropy(node: Node) -> Compute:
    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        features, labels = inputs
        if features.ndim != 2:
            raise InvalidArgumentError(f"logits must be 2-D, but got shape {_dims(features.shape)}")
        if labels.ndim != 1:
            raise InvalidArgumentError(f"labels must be 1-D, but got shape {_dims(labels.shape)}")
        n, classes = features.shape
        if labels.shape[0] != n:
            raise InvalidArgumentError(
                "logits and labels must have the same first dimension, got logits shape "
                f"{_dims(features.shape)} and labels shape {_dims(labels.shape)}"
            )
        if classes == 0:
            raise InvalidArgumentError(
                f"Must have at least one class, but got logits shape {_dims(features.shape)}"
            )
        bad = (labels < 0) | (labels >= classes)
        if bad.any():
            raise InvalidArgumentError(
                f"Received a label value of {labels[bad][0]} which is outside the valid range of "
                f"[0, {classes}).  Label values: {' '.join(str(v) for v in labels.tolist())}"
            )
        half, (f,) = _widen(features)
        neg_log, backprop = _log_softmax(f)
        rows = np.arange(n)
        loss = neg_log[rows, labels]
        backprop[rows, labels] -= 1
        if half:
            return loss.astype(_F16), backprop.astype(_F16)
        return loss, backprop

    return compute
