"""Op fuzz families for math edge cases (dev only; loaded by tools/op_fuzz.py).

Deeper than op_fuzz's own unary/binary/cast/reductions: scans with every attr, Select's row condition and
SelectV2's three-way broadcast, ClipByValue with crossed bounds, AddN, casts of NaN/inf/out-of-range values,
half-to-even rounding, Pow and integer wrap-around, reductions over NaN, empty axes and bad axes, modulo and
division by zero, extreme arguments to the saturating functions, float16 predicates, logic, strings.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from op_fuzz import FLOATS, Case, broadcastable, shape, values

Family = Callable[[np.random.Generator, int], list[Case]]

NUMERIC = (*FLOATS, "int8", "int16", "int32", "int64", "uint8")


def _pick(rng: np.random.Generator, options: tuple[str, ...]) -> str:
    return str(rng.choice(options))


def _huge(rng: np.random.Generator, dims: tuple[int, ...], dtype: str) -> np.ndarray:
    """Floats of every magnitude, from denormals to overflow, with NaN and infinities."""
    n = int(np.prod(dims)) if dims else 1
    special = np.array([0.0, -0.0, np.nan, np.inf, -np.inf, 1e-45, -1e-45, 1e-300, 88.7, -88.7, 89.0, -104.0])
    mags = 10.0 ** rng.uniform(-8, 40, n) * rng.choice([-1.0, 1.0], n)
    pick = rng.random(n) < 0.3
    mags[pick] = rng.choice(special, int(pick.sum()))
    with np.errstate(all="ignore"):
        return mags.astype(dtype).reshape(dims)


def scan(rng: np.random.Generator, count: int) -> list[Case]:
    cases = []
    for op in ("Cumsum", "Cumprod"):
        for _ in range(count):
            dtype = _pick(rng, (*NUMERIC, "uint16", "complex64"))
            dims = shape(rng, int(rng.integers(0, 4)) if rng.random() < 0.1 else int(rng.integers(1, 4)))
            x = values(rng, dims, dtype, edge=rng.random() < 0.5)
            rank = len(dims)
            a = int(rng.integers(-rank, rank)) if rank else 0
            if rng.random() < 0.1:
                a = int(rng.choice([rank, -rank - 1]))
            axis_dtype = _pick(rng, ("int32", "int64"))
            axis = np.array(a, axis_dtype)
            if rng.random() < 0.05:
                axis = np.array([a], axis_dtype)  # not a scalar
            attrs = {"exclusive": bool(rng.random() < 0.5), "reverse": bool(rng.random() < 0.5)}
            cases.append(Case(op, {"x": x, "axis": axis}, attrs))
    return cases


def select(rng: np.random.Generator, count: int) -> list[Case]:
    cases = []
    for _ in range(count):
        dtype = _pick(rng, (*NUMERIC, "bool"))
        dims = shape(rng, int(rng.integers(0, 4)))
        x, y = values(rng, dims, dtype), values(rng, dims, dtype)
        r = rng.random()
        if r < 0.3:
            cond_dims = dims
        elif r < 0.6:
            cond_dims = dims[:1] if dims else ()
        elif r < 0.75:
            cond_dims = ()
        else:
            cond_dims = shape(rng, int(rng.integers(0, 3)))  # mostly wrong
        if rng.random() < 0.1:
            y = values(rng, broadcastable(rng, dims), dtype)
        cond = values(rng, cond_dims, "bool")
        cases.append(Case("Select", {"condition": cond, "x": x, "y": y}))
    for _ in range(count):
        dtype = _pick(rng, (*NUMERIC, "bool"))
        dims = shape(rng, int(rng.integers(0, 4)))
        shapes = [dims, broadcastable(rng, dims), broadcastable(rng, dims)]
        rng.shuffle(shapes)
        if rng.random() < 0.1:
            shapes[int(rng.integers(0, 3))] = shape(rng, 2)  # may not broadcast
        cond = values(rng, shapes[0], "bool")
        cases.append(
            Case(
                "SelectV2",
                {"condition": cond, "t": values(rng, shapes[1], dtype), "e": values(rng, shapes[2], dtype)},
            )
        )
    return cases


def _bound(rng: np.random.Generator, dims: tuple[int, ...], dtype: str) -> np.ndarray:
    q = rng.random()
    if q < 0.5:
        return values(rng, (), dtype)
    if q < 0.85:
        return values(rng, dims, dtype)
    return values(rng, broadcastable(rng, dims), dtype)  # TF: scalar or same shape only


def clip(rng: np.random.Generator, count: int) -> list[Case]:
    cases = []
    for _ in range(count * 2):
        dtype = _pick(rng, NUMERIC)
        dims = shape(rng)
        t = values(rng, dims, dtype)
        lo, hi = _bound(rng, dims, dtype), _bound(rng, dims, dtype)
        if rng.random() < 0.5:  # often ordered, else maybe min > max
            lo, hi = np.minimum(lo, hi), np.maximum(lo, hi)
        cases.append(Case("ClipByValue", {"t": t, "clip_value_min": lo, "clip_value_max": hi}))
    return cases


def add_n(rng: np.random.Generator, count: int) -> list[Case]:
    cases = []
    for _ in range(count):
        dtype = _pick(rng, (*NUMERIC, "uint16", "int64", "complex128"))
        dims = shape(rng)
        n = int(rng.integers(1, 12)) if rng.random() < 0.7 else int(rng.integers(12, 30))
        xs = [values(rng, dims, dtype) for _ in range(n)]
        if rng.random() < 0.1 and n > 1:
            xs[-1] = values(rng, broadcastable(rng, dims), dtype)  # TF: same shape only
        cases.append(Case("AddN", {"inputs": xs}))
    return cases


CAST_TARGETS = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "bool", *FLOATS)


def cast_edge(rng: np.random.Generator, count: int) -> list[Case]:
    cases = []
    edge = np.array(
        [
            np.nan,
            np.inf,
            -np.inf,
            0.0,
            -0.0,
            0.5,
            -0.5,
            1.5,
            -1.5,
            2.5,
            -2.5,
            127.5,
            128.0,
            255.9,
            256.0,
            -129.0,
            300.0,
            65504.0,
            65520.0,
            70000.0,
            -70000.0,
            2.0**31,
            -(2.0**31),
            2.0**31 + 5e3,
            -(2.0**31) - 5e3,
            2.0**32,
            2.0**63,
            -(2.0**63),
            2.0**64,
            1e20,
            -1e20,
            1e-8,
            6e-8,
            3e-5,
            1e39,
            -1e39,
            3.4e38,
            1.0000001,
            0.1,
            1 / 3,
        ]
    )
    for src in FLOATS:
        for dst in CAST_TARGETS:
            if dst == src:
                continue
            n = int(rng.choice([1, 7, 8, 15, 16, 17, 31, 32, 33, 40, 47, 64, 100]))
            dims = (n,) if rng.random() < 0.7 else (2, n)
            with np.errstate(all="ignore"):
                x = rng.choice(edge, size=dims).astype(src)
            cases.append(Case("Cast", {"x": x}, {"DstT": dst}))
            if dst in FLOATS:
                cases.append(Case("Cast", {"x": x}, {"DstT": dst, "Truncate": True}, note="Truncate"))
    ints = np.array(
        [
            0,
            1,
            -1,
            127,
            128,
            255,
            256,
            -128,
            -129,
            65504,
            65520,
            70000,
            2**24 + 1,
            2**31 - 1,
            -(2**31),
            2**53 + 1,
            2**62 + 1,
        ]
    )
    for src in ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "bool"):
        for dst in CAST_TARGETS:
            if dst == src:
                continue
            if src == "bool":
                x = rng.random(7) < 0.5
            else:
                with np.errstate(all="ignore"):
                    x = ints.astype(src)
            cases.append(Case("Cast", {"x": x}, {"DstT": dst, "Truncate": bool(rng.random() < 0.5)}))
    for src in ("complex64", "complex128"):
        for dst in ("float32", "float64", "int32", "bool", "complex64", "complex128"):
            if dst != src:
                x = (rng.standard_normal(5) * 100 + 1j * rng.standard_normal(5)).astype(src)
                x[0] = 0j
                x[1] = 1j
                cases.append(Case("Cast", {"x": x}, {"DstT": dst}))
    return cases


def rounding(rng: np.random.Generator, count: int) -> list[Case]:
    cases = []
    halves = np.arange(-6, 6) + 0.5
    for op in ("Round", "Rint", "Floor", "Ceil"):
        for dtype in FLOATS:
            x = np.concatenate(
                [halves, values(rng, (6,), dtype), [2.0**52 + 1, -(2.0**23) - 0.5, 0.49999997]]
            )
            with np.errstate(all="ignore"):
                cases.append(Case(op, {"x": x.astype(dtype)}))
        if op == "Round":
            for dtype in ("int8", "int32", "int64"):
                cases.append(Case(op, {"x": values(rng, (6,), dtype)}))
    return cases


def pow_edge(rng: np.random.Generator, count: int) -> list[Case]:
    cases = []
    base = np.array([0.0, -0.0, 1.0, -1.0, 2.0, -2.0, -8.0, 0.5, np.nan, np.inf, -np.inf, 10.0])
    exps = np.array(
        [0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 1 / 3, 2.0, 3.0, np.nan, np.inf, -np.inf, 400.0, -400.0]
    )
    for dtype in FLOATS:
        with np.errstate(all="ignore"):
            cases.append(Case("Pow", {"x": base[:, None].astype(dtype), "y": exps[None, :].astype(dtype)}))
    for dtype in ("int8", "int16", "int32", "int64"):
        b = np.array([0, 1, -1, 2, -2, 3, 7, -7], dtype)
        e = np.array([0, 1, 2, 3, 7, 31, 63], dtype)
        cases.append(Case("Pow", {"x": b[:, None], "y": e[None, :]}, note="non-negative"))
        for neg in ([-1], [0, -2], [-3]):
            for bases in ([2, 3], [1, -1], [0, 0]):
                cases.append(
                    Case("Pow", {"x": np.array(bases, dtype), "y": np.array(neg * (2 // len(neg)), dtype)})
                )
    for _ in range(count):
        dtype = _pick(rng, ("int32", "int64", "float32", "complex64"))
        dims = shape(rng)
        x = values(rng, dims, dtype)
        y = values(rng, broadcastable(rng, dims), dtype)
        if dtype.startswith("int"):
            y = np.abs(y) % 5
        cases.append(Case("Pow", {"x": x, "y": y}))
    return cases


def int_wrap(rng: np.random.Generator, count: int) -> list[Case]:
    cases = []
    for dtype in ("int8", "int16", "int32", "int64", "uint8", "uint16"):
        info = np.iinfo(dtype)
        x = np.array([info.min, info.max, info.min + 1, 0, 1], dtype)
        y = np.array([info.min, info.max, -1 if info.min else 1, info.max, info.max], dtype)
        for op in ("Add", "AddV2", "Sub", "Mul", "SquaredDifference", "Maximum", "Minimum"):
            cases.append(Case(op, {"x": x, "y": y}))
        for op in ("Neg", "Abs", "Square", "Sign"):
            if info.min == 0 and op in ("Neg", "Abs", "Sign"):
                continue
            cases.append(Case(op, {"x": x}))
        if info.min:
            for op in ("Div", "FloorDiv", "TruncateDiv", "FloorMod", "TruncateMod"):
                cases.append(
                    Case(op, {"x": np.array([info.min, 7, -7], dtype), "y": np.array([-1, -1, 2], dtype)})
                )
    return cases


def _axes(rng: np.random.Generator, rank: int) -> np.ndarray:
    r = rng.random()
    dtype = _pick(rng, ("int32", "int64"))
    if r < 0.1 and rank:
        a = int(rng.integers(-rank, rank))
        return np.array([a, a], dtype)  # duplicate
    if r < 0.15 and rank:
        a = int(rng.integers(0, rank))
        return np.array([a, a - rank], dtype)  # duplicate, one of them negative
    if r < 0.25:
        return np.array([rank if rng.random() < 0.5 else -rank - 1], dtype)  # out of range
    if r < 0.35:
        return np.array(int(rng.integers(-rank, rank)) if rank else 0, dtype)  # scalar
    k = int(rng.integers(0, rank + 1))
    axes = rng.choice(rank, size=k, replace=False) if k else np.zeros(0, np.int64)
    return np.where(rng.random(k) < 0.5, axes - rank, axes).astype(dtype)


def reduce_edge(rng: np.random.Generator, count: int) -> list[Case]:
    cases = []
    ops = ("Sum", "Mean", "Prod", "Max", "Min", "EuclideanNorm")
    for op in ops:
        for _ in range(count):
            dtype = (
                _pick(rng, (*NUMERIC, "uint16", "complex64"))
                if op not in ("Max", "Min")
                else _pick(rng, NUMERIC)
            )
            dims = shape(rng, int(rng.integers(0, 4)), max_dim=int(rng.choice([3, 6])))
            if rng.random() < 0.3 and dims:
                dims = tuple(0 if i == 0 else d for i, d in enumerate(dims))
            x = values(rng, dims, dtype)
            if dtype.startswith("int") and rng.random() < 0.5:
                info = np.iinfo(dtype)
                x = rng.integers(info.min, int(info.max) + 1, size=dims, dtype=dtype)  # overflowing sums
            cases.append(
                Case(op, {"input": x, "axis": _axes(rng, len(dims))}, {"keep_dims": bool(rng.random() < 0.5)})
            )
    for op in ("ArgMax", "ArgMin"):
        for _ in range(count):
            dtype = _pick(rng, (*NUMERIC, "uint16", "bool"))
            dims = shape(rng, int(rng.integers(0, 4)))
            x = values(rng, dims, dtype)
            if dtype in FLOATS and rng.random() < 0.5 and x.size:
                x.reshape(-1)[rng.random(x.size) < 0.5] = np.nan
            rank = len(dims)
            dim = np.array(int(rng.integers(-rank - 1, rank + 1)), _pick(rng, ("int32", "int64")))
            out = _pick(rng, ("int32", "int64", "int16", "uint16"))
            cases.append(Case(op, {"input": x, "dimension": dim}, {"output_type": out}))
    for op in ("All", "Any"):
        for _ in range(count // 2):
            dims = shape(rng, int(rng.integers(0, 4)))
            x = values(rng, dims, "bool")
            cases.append(
                Case(op, {"input": x, "axis": _axes(rng, len(dims))}, {"keep_dims": bool(rng.random() < 0.5)})
            )
    # NaN placement against Max/Min
    for op in ("Max", "Min", "ArgMax", "ArgMin"):
        for dtype in FLOATS:
            x = np.array(
                [
                    [np.nan, 1.0, 2.0],
                    [1.0, np.nan, -1.0],
                    [3.0, 2.0, np.nan],
                    [np.nan] * 3,
                    [-np.inf, np.nan, np.inf],
                ],
                dtype,
            )
            for axis in (0, 1, -1):
                if op.startswith("Arg"):
                    cases.append(Case(op, {"input": x, "dimension": np.array(axis, "int32")}))
                else:
                    cases.append(Case(op, {"input": x, "axis": np.array([axis], "int32")}))
    return cases


def mod_edge(rng: np.random.Generator, count: int) -> list[Case]:
    cases = []
    v = np.array([0.0, -0.0, 1.0, -1.0, 2.5, -2.5, 7.0, -7.0, np.inf, -np.inf, np.nan, 1e-30, 1e30, 3.0])
    for op in ("FloorMod", "TruncateMod", "FloorDiv", "TruncateDiv", "DivNoNan", "Div", "RealDiv", "Atan2"):
        for dtype in FLOATS:
            x, y = v[:, None].astype(dtype), v[None, :].astype(dtype)
            names = ("y", "x") if op == "Atan2" else ("x", "y")
            cases.append(Case(op, {names[0]: x, names[1]: y}))
    for op in ("Div", "RealDiv", "FloorDiv", "TruncateDiv", "FloorMod", "TruncateMod", "DivNoNan"):
        for dtype in ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"):
            x = (
                np.array([5, -5, 0, 7, -8, 3], dtype)
                if dtype[0] == "i"
                else np.array([5, 0, 7, 8, 3, 255], dtype)
            )
            y = (
                np.array([2, 2, 3, -3, 3, 1], dtype)
                if dtype[0] == "i"
                else np.array([2, 2, 3, 3, 3, 7], dtype)
            )
            cases.append(Case(op, {"x": x, "y": y}))
            yz = y.copy()
            yz[int(rng.integers(0, len(y)))] = 0
            cases.append(Case(op, {"x": x, "y": yz}, note="zero divisor"))
            cases.append(Case(op, {"x": np.zeros((0,), dtype), "y": np.zeros((0,), dtype)}, note="empty"))
            cases.append(
                Case(op, {"x": np.zeros((0,), dtype), "y": np.zeros((), dtype)}, note="empty by zero")
            )
    for dtype in ("complex64", "complex128"):
        x = np.array([1 + 1j, 0j, 2 - 1j], dtype)
        y = np.array([0j, 0j, 1j], dtype)
        for op in ("DivNoNan", "Div", "RealDiv"):
            cases.append(Case(op, {"x": x, "y": y}))
    return cases


def extremes(rng: np.random.Generator, count: int) -> list[Case]:
    cases = []
    ops_x = (
        "Sign",
        "Sigmoid",
        "Tanh",
        "Erf",
        "Erfc",
        "Exp",
        "Expm1",
        "Log1p",
        "Sqrt",
        "Rsqrt",
        "Reciprocal",
        "IsNan",
        "IsInf",
        "IsFinite",
        "Neg",
        "Abs",
        "Square",
        "Sin",
        "Cos",
        "Floor",
        "Ceil",
        "Rint",
        "Round",
        "Log",
        "Tan",
    )
    ops_f = ("Softplus", "Softsign", "Relu", "Relu6", "Elu", "Selu")
    for op in (*ops_x, *ops_f):
        for dtype in FLOATS:
            for _ in range(max(1, count // 10)):
                x = _huge(rng, shape(rng, 1, 16), dtype)
                cases.append(Case(op, {"features" if op in ops_f else "x": x}))
    # the far tails of Erf/Erfc and the switch points of the sigmoid family
    grid = np.concatenate(
        [np.linspace(-30, 30, 241), [-88.0, -87.0, 88.0, 89.0, -104.0, -710, 710, 1e-20, -1e-20]]
    )
    for op in ("Erf", "Erfc", "Sigmoid", "Tanh", "Softplus"):
        for dtype in FLOATS:
            with np.errstate(all="ignore"):
                x = grid.astype(dtype)
            cases.append(Case(op, {"features" if op in ops_f else "x": x}, note="grid"))
    for op in ("Sign", "Abs", "Neg", "Square", "Reciprocal", "IsNan", "Sigmoid", "Tanh", "Sqrt", "Exp"):
        for dtype in ("complex64", "complex128"):
            x = np.array([0j, 1 + 1j, -2 + 0.5j, 1e20 + 1e20j, np.nan + 0j], dtype)
            cases.append(Case(op, {"x": x}))
    for dtype in ("complex64", "complex128"):
        big = 1e20 if dtype == "complex64" else 1e160
        pool = np.array(
            [0j, 1 + 1j, -2 + 0.5j, big * (1 + 1j), big * (0.3 - 1j), big + 1j, np.inf, np.nan * 1j]
        )
        for _ in range(max(1, count // 5)):
            dims = shape(rng, 1, 12)
            x = rng.choice(pool, size=dims).astype(dtype)
            y = rng.choice(pool, size=broadcastable(rng, dims)).astype(dtype)
            op = _pick(rng, ("Mul", "Square", "Add", "Sub"))
            cases.append(Case(op, {"x": x} if op == "Square" else {"x": x, "y": y}))
    return cases


def logic(rng: np.random.Generator, count: int) -> list[Case]:
    cases = []
    for op in ("IsNan", "IsInf", "IsFinite"):
        cases.append(Case(op, {"x": np.array([np.nan, np.inf, -np.inf, 65504, 0, -0.0, 6e-8], "float16")}))
    for _ in range(count):
        a = shape(rng)
        b = broadcastable(rng, a)
        if rng.random() < 0.1:
            b = shape(rng, 2)
        if rng.random() < 0.5:
            a, b = b, a
        op = _pick(rng, ("LogicalAnd", "LogicalOr"))
        cases.append(Case(op, {"x": values(rng, a, "bool"), "y": values(rng, b, "bool")}))
        cases.append(Case("LogicalNot", {"x": values(rng, a, "bool")}))
    for dtype in ("uint8", "uint16", "uint32", "uint64"):
        x = np.array([0, 1, 5, 200, 255], dtype)
        y = np.array([255, 3, 7, 10, 0], dtype)
        cases.append(Case("SquaredDifference", {"x": x, "y": y}))
    for dtype in (*FLOATS, "bool", "int8", "uint8", "complex64"):
        for op in ("Equal", "NotEqual"):
            a = shape(rng)
            b = broadcastable(rng, a) if rng.random() < 0.8 else shape(rng, 1)
            attrs = {"incompatible_shape_error": bool(rng.random() < 0.7)}
            cases.append(Case(op, {"x": values(rng, a, dtype), "y": values(rng, b, dtype)}, attrs))
    words = np.array([b"", b"a", b"abc", b"\x00", "é".encode(), b"abc\x00"], dtype=object)
    for op in ("Equal", "NotEqual"):
        for _ in range(max(2, count // 4)):
            a = shape(rng, int(rng.integers(0, 3)))
            b = broadcastable(rng, a)
            x = rng.choice(words, size=a).astype(object) if a else np.array(rng.choice(words), dtype=object)
            y = rng.choice(words, size=b).astype(object) if b else np.array(rng.choice(words), dtype=object)
            cases.append(Case(op, {"x": np.asarray(x, dtype=object), "y": np.asarray(y, dtype=object)}))
    return cases


def families() -> dict[str, Family]:
    return {
        "m_scan": scan,
        "m_select": select,
        "m_clip": clip,
        "m_addn": add_n,
        "m_cast": cast_edge,
        "m_round": rounding,
        "m_pow": pow_edge,
        "m_wrap": int_wrap,
        "m_reduce": reduce_edge,
        "m_mod": mod_edge,
        "m_extreme": extremes,
        "m_logic": logic,
    }
