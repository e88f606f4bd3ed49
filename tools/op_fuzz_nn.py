"""Differential fuzz families for the neural-network kernels (``nn_ops``, ``conv_ops``, ``image_ops``).

Loaded by ``tools/op_fuzz.py``: matrix products, einsum, bias and activations, softmax, LRN, fused batch
norm (inference), convolutions, pooling and resizing. Inputs are placeholders of static shape, so shape
mismatches TensorFlow catches at graph construction are skipped there; what reaches the run-time checks
are values (input_sizes, ksize tensors, resize sizes) and attr combinations shape inference lets through.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from op_fuzz import FLOATS, Case, broadcastable, shape, values

Rng = np.random.Generator


def _pick(rng: Rng, options: Any) -> Any:
    return options[int(rng.integers(0, len(options)))]


def _floats(rng: Rng, dims: tuple[int, ...], dtype: str, edge_p: float = 0.3) -> np.ndarray:
    """Values with edge values (NaN, infinities) in about ``edge_p`` of the cases."""
    return values(rng, dims, dtype, edge=bool(rng.random() < edge_p))


# ---- matrix products ------------------------------------------------------------------------------------

_MATMUL_TYPES = (*FLOATS, "int32", "int64", "complex64", "complex128")


def matmul(rng: Rng, count: int) -> list[Case]:
    cases = []
    for _ in range(count):
        dtype = _pick(rng, _MATMUL_TYPES)
        m, k, n = (int(d) for d in rng.integers(0, 6, size=3))
        if rng.random() < 0.15 and dtype in FLOATS:  # deep contractions: _matmul splits past 384
            m, k, n = 70, 400, 3
        ta, tb = bool(rng.random() < 0.5), bool(rng.random() < 0.5)
        a = (k, m) if ta else (m, k)
        b = (n, k) if tb else (k, n)
        if rng.random() < 0.1:  # a mismatch: refused at construction, but keeps the harness honest
            b = (b[0] + 1, b[1])
        cases.append(
            Case(
                "MatMul",
                {"a": _floats(rng, a, dtype), "b": _floats(rng, b, dtype)},
                {"transpose_a": ta, "transpose_b": tb},
            )
        )
    return cases


def _batch_shapes(rng: Rng, broadcast: bool) -> tuple[tuple[int, ...], tuple[int, ...]]:
    batch = shape(rng, int(rng.integers(0, 3)), 3)
    if not broadcast:
        return batch, batch
    other = broadcastable(rng, batch)
    return (batch, other) if rng.random() < 0.5 else (other, batch)


def batch_matmul(rng: Rng, count: int) -> list[Case]:
    cases = []
    for _ in range(count):
        op = _pick(rng, ("BatchMatMul", "BatchMatMulV2", "BatchMatMulV3"))
        dtype = _pick(rng, ("float16", "float32", "float64", "int32", "int64", "complex64"))
        bx, by = _batch_shapes(rng, op != "BatchMatMul")
        if op == "BatchMatMul" and not bx:
            bx = by = (int(rng.integers(1, 3)),)
        m, k, n = (int(d) for d in rng.integers(0, 5, size=3))
        adj_x, adj_y = bool(rng.random() < 0.5), bool(rng.random() < 0.5)
        x = (*bx, k, m) if adj_x else (*bx, m, k)
        y = (*by, n, k) if adj_y else (*by, k, n)
        attrs: dict[str, Any] = {"adj_x": adj_x, "adj_y": adj_y}
        xv, yv = _floats(rng, x, dtype), _floats(rng, y, dtype)
        if op == "BatchMatMulV3":
            if rng.random() < 0.3:
                # mixed input types TF's CPU kernel takes: int8/uint8 -> int32? (those it lacks are skipped)
                ta, tb, tout = _pick(
                    rng,
                    (
                        ("int8", "int8", "int32"),
                        ("uint8", "int8", "int32"),
                        ("float32", "float32", "float64"),
                        ("float16", "float16", "float32"),
                        ("int32", "int32", "int64"),
                        ("float32", "float32", "float16"),
                    ),
                )
                xv, yv = _floats(rng, x, ta), _floats(rng, y, tb)
            else:
                tout = dtype
            attrs["Tout"] = tout
        cases.append(Case(op, {"x": xv, "y": yv}, attrs))
    return cases


# (equation, operand count) templates; the sizes of labels are drawn per case, an ellipsis takes 0-2 dims
_EINSUM = (
    "ij,jk->ik",
    "ij,kj->ik",
    "ji,jk->ki",
    "bij,bjk->bik",
    "bij,jk->bik",
    "...ij,...jk->...ik",
    "...ij,jk->...ik",
    "ij,...jk->...ik",
    "i,i->",
    "i,j->ij",
    "i,j->ji",
    "ij,ij->ij",
    "ij,ij->",
    "ij,ji->",
    "ii->i",
    "ii->",
    "iij->j",
    "iij->ij",
    "iji->j",
    "ij->ji",
    "ij->",
    "ij->i",
    "ij->j",
    "i->i",
    "...->...",
    "...i->...",
    "i...->...i",
    "...ii->...i",
    "ii...->...",
    "ij,jk->",
    "ij,jk->ki",
    "abc,cd->abd",
    "abc,cd->dba",
    "abcd,cd->ab",
    "bhqd,bhkd->bhqk",
    "bhqk,bhkd->bqhd",
    "iij,jk->ik",
    "ij,jjk->ik",
    "ij,k->ijk",
    "ij,kl->ijkl",
    "ij,jk->kji",
    "i,ij->j",
    "ij,j->i",
    "ijk,ik->j",
    "...i,...i->...",
    "...i,i->...",
    "i...,i...->...",
    "ab...,b->a...",
    "aab,bc->ac",
    "ab,bb->a",
    "ij,ij->ji",
    "ijk,kji->",
    "a,b->",
    "a,a->a",
    ",->",
    ",i->i",
    "i,->i",
    "->",
    # repeated output labels: the result on a diagonal
    "i->ii",
    "ij->jij",
    "ij,j->iji",
    "...i->...ii",
    "i,i->ii",
    "ij,jk->ikk",
    # invalid at run time or construction
    "ij->k",
    "ij,jk,kl->il",
    "i.j->ij",
)


def _einsum_operand(rng: Rng, sub: str, sizes: dict[str, int], ell: tuple[int, ...]) -> tuple[int, ...]:
    dims: list[int] = []
    rest = sub
    if "..." in sub:
        head, rest_ = sub.split("...")
        mine = ell[len(ell) - int(rng.integers(0, len(ell) + 1)) :]
        mine = tuple(d if rng.random() < 0.7 else 1 for d in mine)
        return (*[sizes[c] for c in head], *mine, *[sizes[c] for c in rest_])
    for c in rest:
        dims.append(sizes.get(c, 1))
    return tuple(dims)


def einsum(rng: Rng, count: int) -> list[Case]:
    cases = []
    for equation in _EINSUM:
        for _ in range(max(1, count // 10)):
            dtype = _pick(rng, ("float32", "float32", "float64", "float16", "int32", "int64", "complex64"))
            lhs = equation.split("->")[0]
            sizes = {c: int(rng.integers(0 if rng.random() < 0.1 else 1, 5)) for c in "abcdhijklqb"}
            ell = shape(rng, int(rng.integers(0, 3)), 3)
            operands = []
            for sub in lhs.split(","):
                dims = _einsum_operand(rng, sub, sizes, ell) if "." not in sub or "..." in sub else (2, 2)
                if rng.random() < 0.05 and dims:  # a wrong size: caught at construction or at run time
                    dims = (dims[0] + 1, *dims[1:])
                operands.append(_floats(rng, dims, dtype, 0.15))
            cases.append(Case("Einsum", {"inputs": operands}, {"equation": equation}, note=equation))
    return cases


# ---- bias, activations, softmax, normalization ---------------------------------------------------------


def bias_add(rng: Rng, count: int) -> list[Case]:
    cases = []
    for _ in range(count):
        op = _pick(rng, ("BiasAdd", "BiasAdd", "BiasAddV1"))
        rank = int(rng.integers(1, 6)) if rng.random() < 0.9 else 0
        dims = shape(rng, rank, 4)
        fmt = _pick(rng, ("NHWC", "NCHW"))
        dtype = _pick(rng, (*FLOATS, "int32", "int64", "int8", "uint8", "complex64"))
        axis = 1 if fmt == "NCHW" and op == "BiasAdd" and rank >= 2 else rank - 1
        c = dims[axis] if rank else 1
        if rng.random() < 0.05:
            c += 1
        attrs = {"data_format": fmt} if op == "BiasAdd" else {}
        cases.append(Case(op, {"value": _floats(rng, dims, dtype), "bias": _floats(rng, (c,), dtype)}, attrs))
    return cases


def leaky_relu(rng: Rng, count: int) -> list[Case]:
    cases = []
    for _ in range(count):
        alpha = float(
            _pick(rng, (0.2, 0.0, 1.0, 1.5, 3.0, -0.5, -2.0, 0.01, 1e-8, 1e30, float(rng.normal())))
        )
        dtype = _pick(rng, FLOATS)
        cases.append(Case("LeakyRelu", {"features": values(rng, shape(rng), dtype)}, {"alpha": alpha}))
    return cases


def softmax(rng: Rng, count: int) -> list[Case]:
    cases = []
    for _ in range(count):
        op = _pick(rng, ("Softmax", "LogSoftmax"))
        dtype = _pick(rng, FLOATS)
        dims = shape(rng, int(rng.integers(0 if rng.random() < 0.05 else 1, 5)), 5)
        x = values(rng, dims, dtype, edge=bool(rng.random() < 0.5))
        if x.ndim and x.size and rng.random() < 0.3:  # rows of all -inf / +inf / NaN
            x[..., :] = x.dtype.type(_pick(rng, (-np.inf, np.inf, np.nan, 0.0, 80.0, -1e4)))
            x = x.copy()
        cases.append(Case(op, {"logits": x}))
    return cases


def lrn(rng: Rng, count: int) -> list[Case]:
    cases = []
    for _ in range(count):
        dtype = _pick(rng, ("float32", "float32", "float16"))
        rank = 4 if rng.random() < 0.95 else 3
        dims = shape(rng, rank, 6)
        attrs = {
            "depth_radius": int(_pick(rng, (0, 1, 2, 5, 7))),
            "bias": float(_pick(rng, (1.0, 0.5, 2.0, 1e-3))),
            "alpha": float(_pick(rng, (1.0, 1e-4, 0.5, 2.0))),
            "beta": float(_pick(rng, (0.5, 0.75, 1.0, 0.3, 2.0))),
        }
        cases.append(Case("LRN", {"input": _floats(rng, dims, dtype, 0.2)}, attrs))
    return cases


def fused_batch_norm(rng: Rng, count: int) -> list[Case]:
    cases = []
    for _ in range(count):
        op = _pick(rng, ("FusedBatchNormV3", "FusedBatchNormV3", "FusedBatchNorm", "FusedBatchNormV2"))
        fmt = _pick(rng, ("NHWC", "NCHW")) if rng.random() < 0.9 else _pick(rng, ("NDHWC", "NCDHW"))
        rank = 5 if fmt in ("NDHWC", "NCDHW") else 4
        dims = shape(rng, rank, 4)
        xdt = "float32" if op == "FusedBatchNorm" else _pick(rng, ("float32", "float16"))
        c = dims[1] if fmt.startswith("NC") else dims[-1]
        pc = [c] * 4
        if rng.random() < 0.05:
            pc[int(rng.integers(0, 4))] += 1
        var = np.abs(values(rng, (pc[3],), "float32", edge=False))
        if rng.random() < 0.2:
            var = -var  # negative variance: NaN where it passes epsilon
        inputs = {
            "x": _floats(rng, dims, xdt, 0.2),
            "scale": values(rng, (pc[0],), "float32", edge=False),
            "offset": values(rng, (pc[1],), "float32", edge=False),
            "mean": values(rng, (pc[2],), "float32", edge=False),
            "variance": var,
        }
        training = bool(rng.random() < 0.5)
        attrs: dict[str, Any] = {"is_training": training, "data_format": fmt}
        attrs["epsilon"] = float(_pick(rng, (1e-3, 1e-5, 0.0, 0.1)))
        if op != "FusedBatchNorm" and rng.random() < 0.2:
            attrs["exponential_avg_factor"] = 0.5
        elif training and rng.random() < 0.5:  # what Keras passes: no running statistics
            inputs["mean"] = inputs["variance"] = np.zeros(0, np.float32)
        cases.append(Case(op, inputs, attrs))
    return cases


# ---- convolutions ----------------------------------------------------------------------------------------


def _window(rng: Rng) -> tuple[list[int], list[int], str, list[int]]:
    sh, sw = (int(s) for s in rng.integers(1, 4, size=2))
    dh, dw = (int(s) for s in rng.integers(1, 3, size=2))
    if rng.random() < 0.5:
        dh = dw = 1
    padding = _pick(rng, ("VALID", "SAME", "EXPLICIT"))
    explicit: list[int] = []
    if padding == "EXPLICIT":
        explicit = [0, 0, *(int(p) for p in rng.integers(0, 3, size=4)), 0, 0]
    return [1, sh, sw, 1], [1, dh, dw, 1], padding, explicit


def _conv_attrs(
    fmt: str, strides: list[int], dilations: list[int], padding: str, explicit: list[int]
) -> dict[str, Any]:
    """A convolution's attrs from ``_window``'s NHWC ones, moved to NCHW's positions when ``fmt`` is NCHW."""
    if fmt == "NCHW":
        strides = [1, 1, strides[1], strides[2]]
        dilations = [1, 1, dilations[1], dilations[2]]
        explicit = [0, 0, 0, 0, *explicit[2:6]] if explicit else []
    attrs: dict[str, Any] = {
        "strides": strides,
        "padding": padding,
        "dilations": dilations,
        "data_format": fmt,
    }
    if explicit:
        attrs["explicit_paddings"] = explicit
    return attrs


def conv2d(rng: Rng, count: int) -> list[Case]:
    cases = []
    for _ in range(count):
        dtype = _pick(rng, ("float32", "float32", "float64", "float16", "int32"))
        n, h, w = (
            int(rng.integers(0 if rng.random() < 0.1 else 1, 3)),
            *(int(d) for d in rng.integers(1, 9, size=2)),
        )
        kh, kw = (int(d) for d in rng.integers(1, 5, size=2))
        cf, o = (int(d) for d in rng.integers(1, 5, size=2))
        groups = int(_pick(rng, (1, 1, 1, 2)))
        c = cf * groups
        if groups > 1 and o % groups:
            o *= groups
        strides, dilations, padding, explicit = _window(rng)
        fmt = "NCHW" if rng.random() < 0.08 else "NHWC"
        xdims = (n, c, h, w) if fmt == "NCHW" else (n, h, w, c)
        attrs = _conv_attrs(fmt, strides, dilations, padding, explicit)
        x, f = _floats(rng, xdims, dtype, 0.15), _floats(rng, (kh, kw, cf, o), dtype, 0.15)
        cases.append(Case("Conv2D", {"input": x, "filter": f}, attrs))
    return cases


def depthwise(rng: Rng, count: int) -> list[Case]:
    cases = []
    for _ in range(count):
        dtype = _pick(rng, ("float32", "float32", "float64", "float16"))
        n, h, w = (
            int(rng.integers(0 if rng.random() < 0.1 else 1, 3)),
            *(int(d) for d in rng.integers(1, 10, size=2)),
        )
        kh, kw = (int(d) for d in rng.integers(1, 5, size=2))
        c = int(_pick(rng, (1, 2, 3, 5, 8, 50, 100)))
        m = int(_pick(rng, (1, 1, 1, 2, 3)))
        strides, dilations, padding, explicit = _window(rng)
        strides = [1, strides[1], strides[1], 1] if rng.random() < 0.7 else strides  # TF wants sh == sw
        fmt = "NCHW" if rng.random() < 0.08 else "NHWC"
        xdims = (n, c, h, w) if fmt == "NCHW" else (n, h, w, c)
        attrs = _conv_attrs(fmt, strides, dilations, padding, explicit)
        x, f = _floats(rng, xdims, dtype, 0.15), _floats(rng, (kh, kw, c, m), dtype, 0.15)
        cases.append(Case("DepthwiseConv2dNative", {"input": x, "filter": f}, attrs))
    return cases


def _conv_out(size: int, k: int, s: int, d: int, padding: str, pads: tuple[int, int]) -> int:
    eff = (k - 1) * d + 1
    if padding == "SAME":
        return -(-size // s)
    before, after = pads if padding == "EXPLICIT" else (0, 0)
    return max(0, (size + before + after - eff) // s + 1)


def conv_backprop_input(rng: Rng, count: int) -> list[Case]:
    cases = []
    for _ in range(count):
        dtype = _pick(rng, ("float32", "float32", "float64", "float16"))
        n, h, w = int(rng.integers(1, 3)), *(int(d) for d in rng.integers(1, 8, size=2))
        kh, kw = (int(d) for d in rng.integers(1, 4, size=2))
        c, o = (int(d) for d in rng.integers(1, 4, size=2))
        strides, dilations, padding, explicit = _window(rng)
        if rng.random() < 0.5:
            dilations = [1, 1, 1, 1]
        pads = (explicit[2:4], explicit[4:6]) if explicit else ((0, 0), (0, 0))
        oh = _conv_out(h, kh, strides[1], dilations[1], padding, tuple(pads[0]))
        ow = _conv_out(w, kw, strides[2], dilations[2], padding, tuple(pads[1]))
        sizes = [n, h, w, c]
        kind = rng.random()
        if kind < 0.1:
            sizes[1] += 1  # a size that gives another output size: a run-time error in TF
        elif kind < 0.15:
            sizes[0] = -1
        elif kind < 0.2:
            sizes = [h, w]
        elif kind < 0.23:
            sizes = [n, h, w]
        size_dtype = _pick(rng, ("int32", "int64"))
        attrs: dict[str, Any] = {"strides": strides, "padding": padding, "dilations": dilations}
        if explicit:
            attrs["explicit_paddings"] = explicit
        inputs = {
            "input_sizes": np.array(sizes, size_dtype),
            "filter": _floats(rng, (kh, kw, c, o), dtype, 0.1),
            "out_backprop": _floats(rng, (n, oh, ow, o), dtype, 0.1),
        }
        cases.append(Case("Conv2DBackpropInput", inputs, attrs))
    return cases


def pool(rng: Rng, count: int) -> list[Case]:
    cases = []
    for _ in range(count):
        op = _pick(rng, ("MaxPool", "MaxPool", "MaxPoolV2", "AvgPool"))
        if op == "AvgPool":
            dtype = _pick(rng, ("float32", "float64", "float16"))
        else:
            dtype = _pick(rng, ("float32", "float64", "float16", "int32", "int64", "int8", "uint8", "int16"))
        dims = (
            int(rng.integers(0 if rng.random() < 0.05 else 1, 3)),
            *(int(d) for d in rng.integers(1, 8, size=2)),
            int(rng.integers(1, 5)),
        )
        kh, kw = (int(d) for d in rng.integers(1, 10 if rng.random() < 0.2 else 4, size=2))
        sh, sw = (int(d) for d in rng.integers(1, 4, size=2))
        ksize, strides = [1, kh, kw, 1], [1, sh, sw, 1]
        if rng.random() < 0.05 and op != "AvgPool":  # depthwise max pooling
            kd = int(_pick(rng, (1, 2)))
            ksize, strides = [1, 1, 1, kd], [1, 1, 1, kd]
        padding = _pick(rng, ("VALID", "SAME"))
        x = values(rng, dims, dtype, edge=bool(rng.random() < 0.5))
        attrs: dict[str, Any] = {"padding": padding, "data_format": "NHWC"}
        if op == "MaxPool" and rng.random() < 0.2:
            attrs["padding"] = "EXPLICIT"
            attrs["explicit_paddings"] = [0, 0, *(int(p) for p in rng.integers(0, 3, size=4)), 0, 0]
        if op == "MaxPoolV2":
            inputs = {"input": x, "ksize": np.array(ksize, np.int32), "strides": np.array(strides, np.int32)}
            cases.append(Case(op, inputs, attrs))
        else:
            name = "value" if op == "AvgPool" else "input"
            cases.append(Case(op, {name: x}, {**attrs, "ksize": ksize, "strides": strides}))
    return cases


def resize(rng: Rng, count: int) -> list[Case]:
    cases = []
    for _ in range(count):
        op = _pick(rng, ("ResizeBilinear", "ResizeNearestNeighbor"))
        dtype = _pick(
            rng, ("float32", "float32", "float64", "float16", "uint8", "int32", "int8", "int64", "uint16")
        )
        dims = (
            int(rng.integers(1, 3)),
            int(rng.integers(1, 7)),
            int(rng.integers(1, 7)),
            int(rng.integers(1, 4)),
        )
        if rng.random() < 0.05:
            dims = (dims[0], 0, dims[2], dims[3])
        size = [int(d) for d in rng.integers(1, 12, size=2)]
        if rng.random() < 0.08:
            size[int(rng.integers(0, 2))] = int(_pick(rng, (0, -1)))
        align = bool(rng.random() < 0.4)
        half = bool(rng.random() < 0.4)
        x = values(rng, dims, dtype, edge=bool(rng.random() < 0.2))
        attrs = {"align_corners": align, "half_pixel_centers": half}
        cases.append(Case(op, {"images": x, "size": np.array(size, np.int32)}, attrs))
    return cases


def families() -> dict[str, Callable[[Rng, int], list[Case]]]:
    return {
        "matmul": matmul,
        "batch_matmul": batch_matmul,
        "einsum": einsum,
        "bias_add": bias_add,
        "leaky_relu": leaky_relu,
        "softmax": softmax,
        "lrn": lrn,
        "fused_batch_norm": fused_batch_norm,
        "conv2d": conv2d,
        "depthwise": depthwise,
        "conv_backprop_input": conv_backprop_input,
        "pool": pool,
        "resize": resize,
    }
