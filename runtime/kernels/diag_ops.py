"""Diagonals: Diag, DiagPart and the MatrixDiag family (MatrixDiag, MatrixDiagPart and MatrixSetDiag, V1 to
V3, with ``k`` ranges of diagonals and the four ``align`` choices of where a shorter diagonal sits), what
``tf.linalg.diag``, ``diag_part``, ``set_diag`` and Keras' ``ops.diag``/``ops.diagonal`` write.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from poolserve.runtime.errors import InvalidArgumentError
from poolserve.runtime.kernels._common import _shape_str
from poolserve.runtime.kernels.registry import Compute, OpContext, kernel
from poolserve.runtime.node import Node


@kernel("Diag")
def diag(node: Node) -> Compute:
    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        x = inputs[0]
        if x.ndim == 0:
            raise InvalidArgumentError("Input must be at least rank 1, got 0")
        n = x.size
        out = np.zeros((n, n), x.dtype)
        out[np.arange(n), np.arange(n)] = x.reshape(-1)
        return (out.reshape(x.shape + x.shape),)

    return compute


@kernel("DiagPart")
def diag_part(node: Node) -> Compute:
    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        x = inputs[0]
        if x.ndim % 2:
            raise InvalidArgumentError(
                f"The rank of the tensor should be even and positive, got shape {_shape_str(x.shape)}"
            )
        half = x.ndim // 2
        for i in range(half):
            if x.shape[i] != x.shape[i + half]:
                raise InvalidArgumentError(
                    f"Invalid shape {_shape_str(x.shape)}: dimensions {i} and {i + half} do not match."
                )
        n = math.prod(x.shape[:half])
        return (x.reshape(n, n).diagonal().reshape(x.shape[:half]).copy(),)

    return compute


_ALIGNS = ("LEFT_RIGHT", "RIGHT_LEFT", "LEFT_LEFT", "RIGHT_RIGHT")


def _align(node: Node) -> tuple[bool, bool]:
    """(superdiagonals left-aligned, subdiagonals left-aligned): V3's ``align``; V1 and V2 align left."""
    if not node.has_attr("align"):
        return True, True
    align = node.attr_str("align", "RIGHT_LEFT", choices=_ALIGNS)
    return align in ("LEFT_LEFT", "LEFT_RIGHT"), align in ("LEFT_LEFT", "RIGHT_LEFT")


def _diag_range(k: Any, check_empty: bool = False) -> tuple[int, int]:
    if k.ndim > 1:
        raise InvalidArgumentError(
            f"diag_index must be a scalar or vector, received shape: {_shape_str(k.shape)}"
        )
    if check_empty and k.size == 0:
        raise InvalidArgumentError("diag_index must have at least one element")
    if k.ndim == 1 and not 0 < k.shape[0] <= 2:
        raise InvalidArgumentError(
            f"diag_index must have only one or two elements, received {k.shape[0]} elements."
        )
    values = [int(v) for v in k.reshape(-1).tolist()]
    return values[0], values[-1]


def _check_diag_bounds(lower: int, upper: int, rows: int, cols: int, sep: str) -> None:
    if not (-rows < lower < cols or lower == 0):
        raise InvalidArgumentError(
            f"lower_diag_index is out of bound: {lower}{sep} It must be between {-rows} and {cols}"
        )
    if not (-rows < upper < cols or upper == 0):
        raise InvalidArgumentError(
            f"upper_diag_index is out of bound: {upper} It must be between {-rows} and {cols}"
        )
    if lower > upper:
        raise InvalidArgumentError(
            f"lower_diag_index must not be larger than upper_diag_index: {lower} > {upper}"
        )


def _diag_layout(
    upper: int, num_diags: int, max_len: int, rows: int, cols: int, left: tuple[bool, bool]
) -> tuple[Any, Any, Any, Any]:
    """For each stored diagonal m (diagonal ``upper - m``) and each position n of its [max_len] row: the
    matrix row and column it holds, and whether it holds one (the rest is padding)."""
    d = upper - np.arange(num_diags)[:, None]
    n = np.arange(max_len)[None, :]
    length = np.minimum(rows + np.minimum(0, d), cols - np.maximum(0, d))
    left_aligned = ((d >= 0) & left[0]) | ((d <= 0) & left[1])
    pos = n - np.where(left_aligned, 0, max_len - length)
    valid = (pos >= 0) & (pos < length)
    r = np.where(valid, pos + np.maximum(0, -d), 0)
    c = np.where(valid, pos + np.maximum(0, d), 0)
    return np.broadcast_to(d, valid.shape), r, c, valid


def _matrix_diag(
    diagonal: Any, lower: int, upper: int, rows: int, cols: int, pad: Any, left: tuple[bool, bool]
) -> Any:
    if diagonal.ndim < 1:
        raise InvalidArgumentError(
            f"diagonal must be at least 1-dim, received shape: {_shape_str(diagonal.shape)}"
        )
    if lower > upper:
        raise InvalidArgumentError(
            f"lower_diag_index must not be larger than upper_diag_index: {lower} > {upper}"
        )
    num_diags = upper - lower + 1
    if lower != upper and (diagonal.ndim < 2 or diagonal.shape[-2] != num_diags):
        raise InvalidArgumentError(
            "The number of diagonals provided in the input does not match the lower_diag_index and "
            "upper_diag_index range."
        )
    max_len = diagonal.shape[-1]
    min_rows, min_cols = max_len - min(upper, 0), max_len + max(lower, 0)
    if rows != -1 and rows < min_rows:
        raise InvalidArgumentError("The number of rows is too small.")
    if cols != -1 and cols < min_cols:
        raise InvalidArgumentError("The number of columns is too small.")
    if rows == -1 and cols == -1:
        rows = cols = max(min_rows, min_cols)
    elif rows == -1:
        rows = min_rows
    elif cols == -1:
        cols = min_cols
    if rows != min_rows and cols != min_cols:
        raise InvalidArgumentError(
            "The number of rows or columns is not consistent with the specified d_lower, d_upper, and "
            "diagonal."
        )
    lead = diagonal.shape[:-1] if num_diags == 1 else diagonal.shape[:-2]
    out = np.full((math.prod(lead), rows, cols), pad, diagonal.dtype)
    if out.size and diagonal.size:
        d, r, c, valid = _diag_layout(upper, num_diags, max_len, rows, cols, left)
        m = upper - d
        n = np.broadcast_to(np.arange(max_len)[None, :], valid.shape)
        stored = diagonal.reshape(-1, num_diags, max_len)
        out[:, r[valid], c[valid]] = stored[:, m[valid], n[valid]]
    return out.reshape(*lead, rows, cols)


def _matrix_diag_part(x: Any, lower: int, upper: int, pad: Any, left: tuple[bool, bool]) -> Any:
    if x.ndim < 2:
        raise InvalidArgumentError(f"input must be at least 2-dim, received shape: {_shape_str(x.shape)}")
    rows, cols = x.shape[-2], x.shape[-1]
    _check_diag_bounds(lower, upper, rows, cols, ".")
    num_diags = upper - lower + 1
    max_len = min(rows + min(upper, 0), cols - max(lower, 0))
    shape = (*x.shape[:-2], *((num_diags,) if num_diags > 1 else ()), max_len)
    if math.prod(shape) == 0:
        return np.zeros(shape, x.dtype)
    _, r, c, valid = _diag_layout(upper, num_diags, max_len, rows, cols, left)
    picked = x.reshape(-1, rows, cols)[:, r, c]
    return np.where(valid, picked, pad).astype(x.dtype, copy=False).reshape(shape)


def _matrix_set_diag(x: Any, diagonal: Any, lower: int, upper: int, left: tuple[bool, bool]) -> Any:
    if x.ndim < 2:
        raise InvalidArgumentError(f"input must be at least 2-dim, received shape: {_shape_str(x.shape)}")
    if diagonal.ndim < 1:
        raise InvalidArgumentError(
            f"diagonal must be at least 1-dim, received shape: {_shape_str(diagonal.shape)}"
        )
    rows, cols = x.shape[-2], x.shape[-1]
    _check_diag_bounds(lower, upper, rows, cols, "")
    num_diags = upper - lower + 1
    if lower != upper and (diagonal.ndim < x.ndim - 1 or diagonal.shape[x.ndim - 2] != num_diags):
        raise InvalidArgumentError(
            "The number of diagonals provided in `diag` is not consistent with `lower_diag_index` and "
            "`upper_diag_index`"
        )
    max_len = min(rows + min(upper, 0), cols - max(lower, 0))
    expected = (*x.shape[:-2], *((num_diags,) if num_diags > 1 else ()), max_len)
    if diagonal.shape != expected:
        raise InvalidArgumentError(
            "Either first dimensions of diagonal don't match input.shape[:-2], or diagonal.shape[:-1] is "
            "not equal to the longests diagonal in range [lower_diag_index:upper_diag_index].\nInput shape: "
            f"{_shape_str(x.shape)}\nDiagonal shape: {_shape_str(diagonal.shape)}\nExpected diagonal shape: "
            f"{_shape_str(expected)}"
        )
    if x.size == 0:
        return x
    out = x.reshape(-1, rows, cols).copy()
    _, r, c, valid = _diag_layout(upper, num_diags, max_len, rows, cols, left)
    out[:, r[valid], c[valid]] = diagonal.reshape(-1, num_diags, max_len)[:, valid]
    return out.reshape(x.shape)


def _pad_value(t: Any, dtype: np.dtype[Any]) -> Any:
    return t.reshape(-1)[0] if t.size else np.zeros((), dtype)[()]


@kernel("MatrixDiag")
def matrix_diag(node: Node) -> Compute:
    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        d = inputs[0]
        return (_matrix_diag(d, 0, 0, -1, -1, np.zeros((), d.dtype)[()], (True, True)),)

    return compute


@kernel("MatrixDiagV2", "MatrixDiagV3")
def matrix_diag_v3(node: Node) -> Compute:
    left = _align(node)

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        d, k, rows_t, cols_t, pad_t = inputs
        lower, upper = _diag_range(k)
        rows, cols = int(rows_t.reshape(-1)[0]), int(cols_t.reshape(-1)[0])
        return (_matrix_diag(d, lower, upper, rows, cols, _pad_value(pad_t, d.dtype), left),)

    return compute


@kernel("MatrixDiagPart")
def matrix_diag_part(node: Node) -> Compute:
    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        x = inputs[0]
        return (_matrix_diag_part(x, 0, 0, np.zeros((), x.dtype)[()], (True, True)),)

    return compute


@kernel("MatrixDiagPartV2", "MatrixDiagPartV3")
def matrix_diag_part_v3(node: Node) -> Compute:
    left = _align(node)

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        x, k, pad_t = inputs
        lower, upper = _diag_range(k)
        return (_matrix_diag_part(x, lower, upper, _pad_value(pad_t, x.dtype), left),)

    return compute


@kernel("MatrixSetDiag")
def matrix_set_diag(node: Node) -> Compute:
    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        x, d = inputs
        return (_matrix_set_diag(x, d, 0, 0, (True, True)),)

    return compute


@kernel("MatrixSetDiagV2", "MatrixSetDiagV3")
def matrix_set_diag_v3(node: Node) -> Compute:
    left = _align(node)

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        x, d, k = inputs
        lower, upper = _diag_range(k, check_empty=True)
        return (_matrix_set_diag(x, d, lower, upper, left),)

    return compute
