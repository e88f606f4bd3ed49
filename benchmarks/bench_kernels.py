"""Kernel overhead benchmark: each expensive nn kernel against the direct numpy code for the same math.

Every kernel is bound the way a session binds it (a one-node graph, its compute taken from the registry)
and timed against a hand-written numpy baseline on the same inputs, interleaved so that drift in machine
speed hits both alike. The target: for sizes taking 1 ms or more, a kernel adds at most 10%.

    python -m benchmarks.bench_kernels [--repeat 50] [--json out.json] [--check]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import as_strided

from poolserve.runtime.builder import GraphBuilder
from poolserve.runtime.graph import Graph
from poolserve.runtime.kernels import Compute, OpContext

TARGET_OVERHEAD = 10.0  # percent, for baselines of at least MIN_MS
MIN_MS = 1.0


@dataclass
class Case:
    kernel: str
    shape: str
    op: str
    inputs: list[Any]
    attrs: dict[str, Any]
    baseline: Callable[[], Any]


@dataclass
class Result:
    kernel: str
    shape: str
    numpy_ms: float
    kernel_ms: float
    overhead_pct: float
    target_applies: bool
    max_abs_diff: float


def bind(op: str, inputs: Sequence[Any], attrs: dict[str, Any]) -> Compute:
    """The compute function of a one-node graph running ``op`` on placeholders shaped like ``inputs``."""
    b = GraphBuilder()
    names = [b.placeholder(f"in{i}", x.dtype, x.shape) for i, x in enumerate(inputs)]
    b.op(op, names, {"T": inputs[0].dtype, **attrs}, name="op")
    return Graph(b.graph_def).kernels["op"]


# --- numpy baselines ---------------------------------------------------------------------------------------


def pad_nhwc(x: Any, pad: tuple[int, int, int, int]) -> Any:
    """Zero padding of H and W (a zeroed buffer and one copy: faster than np.pad)."""
    pt, pb, pl, pr = pad
    if not any(pad):
        return x
    n, h, w, c = x.shape
    xp = np.zeros((n, h + pt + pb, w + pl + pr, c), x.dtype)
    xp[:, pt : pt + h, pl : pl + w] = x
    return xp


def im2col_conv(x: Any, w: Any, stride: int, pad: tuple[int, int, int, int]) -> Any:
    """NHWC convolution as the direct numpy code would write it: pad, strided patch view, one matmul."""
    n, h, wd, c = x.shape
    kh, kw, _, o = w.shape
    pt, pb, pl, pr = pad
    xp = pad_nhwc(x, pad)
    oh = (h + pt + pb - kh) // stride + 1
    ow = (wd + pl + pr - kw) // stride + 1
    s0, s1, s2, s3 = xp.strides
    patches = as_strided(xp, (n, oh, ow, kh, kw, c), (s0, s1 * stride, s2 * stride, s1, s2, s3))
    return (patches.reshape(n * oh * ow, kh * kw * c) @ w.reshape(kh * kw * c, o)).reshape(n, oh, ow, o)


def depthwise(x: Any, w: Any, stride: int, pad: tuple[int, int, int, int]) -> Any:
    """NHWC depthwise convolution (multiplier 1): pad, then multiply-accumulate over the taps in place."""
    n, h, wd, c = x.shape
    kh, kw, _, _ = w.shape
    pt, pb, pl, pr = pad
    xp = pad_nhwc(x, pad)
    oh = (h + pt + pb - kh) // stride + 1
    ow = (wd + pl + pr - kw) // stride + 1
    acc = np.zeros((n, oh, ow, c), x.dtype)
    tmp = np.empty_like(acc)
    for i in range(kh):
        for j in range(kw):
            view = xp[:, i : i + (oh - 1) * stride + 1 : stride, j : j + (ow - 1) * stride + 1 : stride]
            np.multiply(view, w[i, j, :, 0], out=tmp)
            acc += tmp
    return acc


def conv_transpose(dy: Any, w: Any, stride: int, out_hw: tuple[int, int]) -> Any:
    """VALID NHWC transposed convolution: one matmul to per-tap columns, then a scatter-add per tap."""
    n, oh, ow, o = dy.shape
    kh, kw, c, _ = w.shape
    cols = (dy.reshape(-1, o) @ w.reshape(kh * kw * c, o).T).reshape(n, oh, ow, kh, kw, c)
    dx = np.zeros((n, *out_hw, c), dy.dtype)
    for i in range(kh):
        for j in range(kw):
            dx[:, i : i + (oh - 1) * stride + 1 : stride, j : j + (ow - 1) * stride + 1 : stride] += cols[
                :, :, :, i, j
            ]
    return dx


def max_pool(x: Any, k: int, stride: int) -> Any:
    """VALID NHWC max pooling with TensorFlow's semantics (NaN skipped, never below the lowest float).

    Separable: a max over the row taps (long contiguous runs) first, then over the column taps.
    """
    h, wd = x.shape[1:3]
    oh, ow = (h - k) // stride + 1, (wd - k) // stride + 1
    rows = np.fmax(x[:, 0 : (oh - 1) * stride + 1 : stride], x[:, 1 : (oh - 1) * stride + 2 : stride])
    for i in range(2, k):
        np.fmax(rows, x[:, i : i + (oh - 1) * stride + 1 : stride], out=rows)
    out = np.fmax(
        rows[:, :, 0 : (ow - 1) * stride + 1 : stride], rows[:, :, 1 : (ow - 1) * stride + 2 : stride]
    )
    for j in range(2, k):
        np.fmax(out, rows[:, :, j : j + (ow - 1) * stride + 1 : stride], out=out)
    return np.fmax(out, np.finfo(x.dtype).min, out=out)


def batch_norm(x: Any, scale: Any, offset: Any, mean: Any, var: Any, eps: float) -> Any:
    y = x - mean
    y *= scale / np.sqrt(var + np.float32(eps))
    y += offset
    return y


def softmax(x: Any) -> Any:
    e = x - x.max(axis=-1, keepdims=True)
    np.exp(e, out=e)
    e /= e.sum(axis=-1, keepdims=True)
    return e


# --- cases -------------------------------------------------------------------------------------------------


def cases(rng: np.random.Generator) -> list[Case]:
    def rand(*shape: int) -> Any:
        return rng.standard_normal(shape, dtype=np.float32)

    out: list[Case] = []

    a, b = rand(256, 1024), rand(1024, 1024)
    out.append(Case("MatMul", "256x1024 @ 1024x1024", "MatMul", [a, b], {}, lambda: a @ b))
    bt = rand(1024, 1024)
    out.append(
        Case("MatMul", "256x1024 @ (1024x1024)^T", "MatMul", [a, bt], {"transpose_b": True}, lambda: a @ bt.T)
    )
    a2, b2 = rand(64, 512), rand(512, 512)
    out.append(Case("MatMul", "64x512 @ 512x512", "MatMul", [a2, b2], {}, lambda: a2 @ b2))

    x, y = rand(8, 128, 64), rand(8, 64, 128)
    out.append(
        Case("BatchMatMulV2", "8x128x64 @ 8x64x128", "BatchMatMulV2", [x, y], {}, lambda: np.matmul(x, y))
    )
    x2, y2 = rand(32, 256, 128), rand(32, 256, 128)
    out.append(
        Case(
            "BatchMatMulV2",
            "32x256x128 @ (32x256x128)^T",
            "BatchMatMulV2",
            [x2, y2],
            {"adj_y": True},
            lambda: np.matmul(x2, y2.transpose(0, 2, 1)),
        )
    )

    conv = {"strides": [1, 1, 1, 1], "padding": "SAME"}
    cx, cw = rand(1, 56, 56, 64), rand(3, 3, 64, 64)
    out.append(
        Case(
            "Conv2D",
            "1x56x56x64 * 3x3x64x64 SAME",
            "Conv2D",
            [cx, cw],
            conv,
            lambda: im2col_conv(cx, cw, 1, (1, 1, 1, 1)),
        )
    )
    cx2, cw2 = rand(4, 28, 28, 128), rand(3, 3, 128, 128)
    out.append(
        Case(
            "Conv2D",
            "4x28x28x128 * 3x3x128x128 VALID",
            "Conv2D",
            [cx2, cw2],
            {"strides": [1, 1, 1, 1], "padding": "VALID"},
            lambda: im2col_conv(cx2, cw2, 1, (0, 0, 0, 0)),
        )
    )
    cx3, cw3 = rand(1, 112, 112, 32), rand(3, 3, 32, 64)
    out.append(
        Case(
            "Conv2D",
            "1x112x112x32 * 3x3x32x64 SAME s2",
            "Conv2D",
            [cx3, cw3],
            {"strides": [1, 2, 2, 1], "padding": "SAME"},
            lambda: im2col_conv(cx3, cw3, 2, (0, 1, 0, 1)),
        )
    )
    px, pw = rand(1, 56, 56, 64), rand(1, 1, 64, 256)
    out.append(
        Case(
            "Conv2D",
            "1x56x56x64 * 1x1x64x256",
            "Conv2D",
            [px, pw],
            conv,
            lambda: (px.reshape(-1, 64) @ pw.reshape(64, 256)).reshape(1, 56, 56, 256),
        )
    )

    dx, dw = rand(1, 112, 112, 32), rand(3, 3, 32, 1)
    out.append(
        Case(
            "DepthwiseConv2dNative",
            "1x112x112x32 * 3x3x32x1 SAME",
            "DepthwiseConv2dNative",
            [dx, dw],
            conv,
            lambda: depthwise(dx, dw, 1, (1, 1, 1, 1)),
        )
    )
    dx2, dw2 = rand(1, 56, 56, 128), rand(3, 3, 128, 1)
    out.append(
        Case(
            "DepthwiseConv2dNative",
            "1x56x56x128 * 3x3x128x1 SAME s2",
            "DepthwiseConv2dNative",
            [dx2, dw2],
            {"strides": [1, 2, 2, 1], "padding": "SAME"},
            lambda: depthwise(dx2, dw2, 2, (0, 1, 0, 1)),
        )
    )

    gy, gw = rand(4, 27, 27, 64), rand(3, 3, 32, 64)
    out.append(
        Case(
            "Conv2DBackpropInput",
            "4x27x27x64 * 3x3x32x64 s2 VALID",
            "Conv2DBackpropInput",
            [np.array([4, 55, 55, 32], np.int32), gw, gy],
            {"T": np.float32, "strides": [1, 2, 2, 1], "padding": "VALID"},
            lambda: conv_transpose(gy, gw, 2, (55, 55)),
        )
    )

    mx = rand(4, 112, 112, 64)
    out.append(
        Case(
            "MaxPool",
            "4x112x112x64 3x3 s2 VALID",
            "MaxPool",
            [mx],
            {"ksize": [1, 3, 3, 1], "strides": [1, 2, 2, 1], "padding": "VALID"},
            lambda: max_pool(mx, 3, 2),
        )
    )
    bx = rand(8, 28, 28, 256)
    sc, of, me, va = rand(256), rand(256), rand(256), np.abs(rand(256))
    out.append(
        Case(
            "FusedBatchNormV3",
            "8x28x28x256 inference",
            "FusedBatchNormV3",
            [bx, sc, of, me, va],
            {"U": np.float32, "is_training": False, "epsilon": 0.001},
            lambda: batch_norm(bx, sc, of, me, va, 0.001),
        )
    )
    lx = rand(64, 32000)
    out.append(Case("Softmax", "64x32000", "Softmax", [lx], {}, lambda: softmax(lx)))
    q, k = rand(8, 12, 128, 64), rand(8, 12, 128, 64)
    out.append(
        Case(
            "Einsum",
            "bhqd,bhkd->bhqk 8x12x128x64",
            "Einsum",
            [q, k],
            {"equation": "bhqd,bhkd->bhqk", "N": 2},
            lambda: np.matmul(q, k.transpose(0, 1, 3, 2)),
        )
    )
    return out


# --- timing ------------------------------------------------------------------------------------------------


def measure(case: Case, repeat: int) -> Result:
    compute = bind(case.op, case.inputs, case.attrs)
    ctx = OpContext()
    inputs = list(case.inputs)

    def run_kernel() -> Any:
        return compute(ctx, inputs)[0]

    expected, got = case.baseline(), run_kernel()
    diff = float(np.max(np.abs(np.asarray(got, np.float64) - expected))) if expected.size else 0.0
    base_times: list[float] = []
    kernel_times: list[float] = []
    # Warm up both, then alternate which goes first so neither always runs on a cold cache.
    for fn in (case.baseline, run_kernel) * 2:
        fn()
    for i in range(repeat):
        order = ((case.baseline, base_times), (run_kernel, kernel_times))
        for fn, times in order if i % 2 == 0 else order[::-1]:
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
    numpy_ms = statistics.median(base_times) * 1e3
    kernel_ms = statistics.median(kernel_times) * 1e3
    # The overhead is the median of the ratios of adjacent runs: shifts in machine speed cancel out.
    ratio = statistics.median(k / b for k, b in zip(kernel_times, base_times, strict=True))
    return Result(
        kernel=case.kernel,
        shape=case.shape,
        numpy_ms=round(numpy_ms, 4),
        kernel_ms=round(kernel_ms, 4),
        overhead_pct=round((ratio - 1) * 100, 2),
        target_applies=numpy_ms >= MIN_MS,
        max_abs_diff=diff,
    )


def table(results: list[Result]) -> str:
    head = f"{'kernel':<22} {'shape':<34} {'numpy ms':>9} {'kernel ms':>10} {'overhead %':>11}"
    lines = [head, "-" * len(head)]
    for r in results:
        flag = ""
        if r.target_applies and r.overhead_pct > TARGET_OVERHEAD:
            flag = "  > target"
        elif not r.target_applies:
            flag = "  (< 1 ms)"
        lines.append(
            f"{r.kernel:<22} {r.shape:<34} {r.numpy_ms:>9.3f} {r.kernel_ms:>10.3f} "
            f"{r.overhead_pct:>10.1f}%{flag}"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.bench_kernels", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--repeat", type=int, default=50, help="timed runs per kernel and baseline (median)")
    parser.add_argument("--json", help="write the results to this JSON file")
    parser.add_argument("--filter", default="", help="only kernels whose name contains this")
    parser.add_argument("--check", action="store_true", help="exit 1 if a kernel misses the overhead target")
    args = parser.parse_args(argv)

    rng = np.random.default_rng(0)
    results = []
    for case in cases(rng):
        if args.filter.lower() in case.kernel.lower():
            results.append(measure(case, args.repeat))
            print(table(results).splitlines()[-1] if len(results) > 1 else table(results), flush=True)
    print()
    print(table(results))
    over = [r for r in results if r.target_applies and r.overhead_pct > TARGET_OVERHEAD]
    print(
        f"\n{len(over)} of {sum(r.target_applies for r in results)} kernels >= {MIN_MS} ms "
        f"exceed {TARGET_OVERHEAD}%"
    )
    if args.json:
        report = {
            "target_overhead_pct": TARGET_OVERHEAD,
            "min_ms": MIN_MS,
            "repeat": args.repeat,
            "numpy": np.__version__,
            "python": platform.python_version(),
            "machine": platform.machine(),
            "results": [asdict(r) for r in results],
        }
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)
    return 1 if args.check and over else 0


if __name__ == "__main__":
    sys.exit(main())
