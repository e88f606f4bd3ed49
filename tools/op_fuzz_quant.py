"""op_fuzz families: fake quantization, QuantizeAndDequantize, and the string kernels added beside them
(base64, Substr, ReduceJoin, StringFormat, StringToNumber, the keyed and legacy hash buckets).

QuantizeV2 and Dequantize are not here: their quantized dtypes (qint8, ...) can be neither fed nor fetched
by poolserve, which op_fuzz's one-op graphs need.

Generators avoid what is an implementation artifact in TensorFlow: FakeQuant with min == max (NaN or zeros
depending on the values), NaN inputs to QuantizeAndDequantize without a given range (the min/max reduction's
NaN handling depends on the vectorization), and Substr positions of INT_MIN (negated in int arithmetic).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from op_fuzz import Case, shape, values

TEXT = [
    "",
    "a",
    "hello",
    "héllo wörld",
    "aGVsbG8",
    "aGVsbG8=",
    "YR==",
    "ab=c",
    "-_-_",
    "+/",
    " 12 ",
    "-7",
    "3.25e2",
    "0x1p3",
    "inf",
    "nan",
    "1e",
    "99999999999",
    "\x80\xff",
    "x" * 20,
]


def texts(rng: np.random.Generator, dims: tuple[int, ...], pool: list[str] | None = None) -> np.ndarray:
    pool = TEXT if pool is None else pool
    n = int(np.prod(dims)) if dims else 1
    out = np.empty(n, dtype=object)
    out[:] = [pool[int(i)].encode("utf-8") for i in rng.integers(0, len(pool), size=n)]
    return out.reshape(dims)


def _range(rng: np.random.Generator) -> tuple[float, float]:
    kind = rng.random()
    if kind < 0.6:
        lo, hi = -float(rng.uniform(0, 8)), float(rng.uniform(0, 8))
    elif kind < 0.8:
        lo, hi = sorted(float(v) for v in rng.uniform(-5, 5, size=2))
    else:
        lo, hi = float(rng.choice([-6.0, -1.0, 0.0])), float(rng.choice([1.0, 6.0, 0.5]))
    if np.float32(lo) == np.float32(hi):
        hi = lo + 1.0
    return lo, hi


def _grid_values(rng: np.random.Generator, dims: tuple[int, ...], lo: float, hi: float) -> np.ndarray:
    """Random values, some of them on the grid and on half steps of [lo, hi] (where rounding decides)."""
    x = values(rng, dims, "float32", edge=False) * np.float32(max(abs(lo), abs(hi)) / 3 + 0.1)
    if x.size:
        steps = rng.integers(-300, 300, size=x.shape) / 2.0
        pick = rng.random(x.shape) < 0.4
        x = np.where(pick, (steps * (hi - lo) / 255.0).astype(np.float32), x).astype(np.float32)
    return x


def fake_quant(rng: np.random.Generator, count: int) -> list[Case]:
    cases = []
    for _ in range(count):
        bits = int(rng.choice([8, 8, 2, 4, 7, 16]))
        narrow = bool(rng.random() < 0.3)
        lo, hi = _range(rng)
        dims = shape(rng, int(rng.integers(0, 4)))
        x = _grid_values(rng, dims, lo, hi)
        if x.size and rng.random() < 0.2:
            x.flat[0] = rng.choice([np.nan, np.inf, -np.inf])
        attrs = {"num_bits": bits, "narrow_range": narrow}
        cases.append(Case("FakeQuantWithMinMaxArgs", {"inputs": x}, {"min": lo, "max": hi, **attrs}))
        lo_t, hi_t = np.array(lo, np.float32), np.array(hi, np.float32)
        if rng.random() < 0.1:
            lo_t, hi_t = hi_t, lo_t  # min > max: TensorFlow computes on, so do we
        cases.append(Case("FakeQuantWithMinMaxVars", {"inputs": x, "min": lo_t, "max": hi_t}, attrs))
        pdims = shape(rng, int(rng.integers(1, 4)))
        depth = pdims[-1]
        ranges = [_range(rng) for _ in range(depth)]
        px = _grid_values(rng, pdims, -4.0, 4.0)
        lows = np.array([r[0] for r in ranges], np.float32)
        highs = np.array([r[1] for r in ranges], np.float32)
        if rng.random() < 0.1:
            lows = np.concatenate([lows, [-1.0]]).astype(np.float32)  # a size TensorFlow refuses
            highs = np.concatenate([highs, [1.0]]).astype(np.float32)
        cases.append(
            Case("FakeQuantWithMinMaxVarsPerChannel", {"inputs": px, "min": lows, "max": highs}, attrs)
        )
    return cases


def quantize_and_dequantize(rng: np.random.Generator, count: int) -> list[Case]:
    cases = []
    for _ in range(count):
        op = str(
            rng.choice(["QuantizeAndDequantizeV2", "QuantizeAndDequantizeV3", "QuantizeAndDequantizeV4"])
        )
        dtype = str(rng.choice(["float32", "float32", "float64"]))  # no half: TensorFlow has no CPU kernel
        signed = bool(rng.random() < 0.7)
        bits = int(rng.choice([8, 8, 4, 1, 16, 30]))
        if rng.random() < 0.05:
            bits = int(rng.choice([0, 62, 63]))
        narrow = bool(rng.random() < 0.3)
        range_given = bool(rng.random() < 0.6)
        rank = int(rng.integers(0, 4))
        dims = shape(rng, rank)
        axis = -1
        if rank and rng.random() < 0.4:
            axis = int(rng.integers(0, rank + (1 if rng.random() < 0.1 else 0)))
        lo, hi = _range(rng)
        if not signed and rng.random() < 0.7:
            lo = 0.0
        x = _grid_values(rng, dims, lo, hi).astype(dtype)
        if range_given and x.size and rng.random() < 0.2:
            x.flat[0] = rng.choice([np.nan, np.inf, -np.inf])
        if axis == -1:
            lo_t, hi_t = np.array(lo, dtype), np.array(hi, dtype)
            if range_given and rng.random() < 0.1:
                lo_t, hi_t = hi_t, lo_t
        else:
            depth = dims[axis] if axis < rank else 1
            if rng.random() < 0.1:
                depth += 1
            ranges = [_range(rng) for _ in range(depth)]
            lo_t = np.array([r[0] for r in ranges], dtype)
            hi_t = np.array([r[1] for r in ranges], dtype)
        inputs = {"input": x, "input_min": lo_t, "input_max": hi_t}
        attrs: dict[str, object] = {
            "signed_input": signed,
            "range_given": range_given,
            "narrow_range": narrow,
            "axis": axis,
        }
        if op == "QuantizeAndDequantizeV3":
            inputs["num_bits"] = np.array(bits, np.int32)
        else:
            attrs["num_bits"] = bits
            attrs["round_mode"] = str(rng.choice(["HALF_TO_EVEN", "HALF_UP"]))
        cases.append(Case(op, inputs, attrs))
    return cases


def _index(rng: np.random.Generator, dims: tuple[int, ...], dtype: str, lo: int, hi: int) -> np.ndarray:
    return rng.integers(lo, hi + 1, size=dims).astype(dtype)


def strings(rng: np.random.Generator, count: int) -> list[Case]:
    cases = []
    for _ in range(count):
        x = texts(rng, shape(rng))
        cases.append(Case("DecodeBase64", {"input": x}))
        cases.append(Case("EncodeBase64", {"input": x}, {"pad": bool(rng.random() < 0.5)}))
        cases.append(Case("StringToNumber", {"string_tensor": x}, {"out_type": "float32"}))
        numbers = texts(
            rng, shape(rng), ["1", " -2 ", "+3", "1.5", "-0", "4294967295", "1e3", "0x1p3", "inf", "7"]
        )
        out_type = str(rng.choice(["float32", "float64", "int32", "int64", "uint32", "uint64"]))
        cases.append(Case("StringToNumber", {"string_tensor": numbers}, {"out_type": out_type}))
        buckets = int(rng.choice([1, 7, 1000, 2**62]))
        cases.append(Case("StringToHashBucket", {"string_tensor": x}, {"num_buckets": buckets}))
        key = [int(k) for k in rng.integers(-(2**63), 2**63 - 1, size=2, dtype=np.int64)]
        cases.append(Case("StringToHashBucketStrong", {"input": x}, {"num_buckets": buckets, "key": key}))
    return cases


def substr(rng: np.random.Generator, count: int) -> list[Case]:
    cases = []
    for _ in range(count * 2):
        dims = shape(rng, int(rng.integers(0, 3)))
        x = texts(rng, dims)
        r = rng.random()
        if r < 0.3:
            pdims: tuple[int, ...] = ()
        elif r < 0.7:
            pdims = dims
        else:
            pdims = shape(rng, int(rng.integers(1, 3)), max_dim=3)
        dtype = str(rng.choice(["int32", "int64"]))
        pos = _index(rng, pdims, dtype, -6, 6)
        length = _index(rng, pdims, dtype, -2, 8)
        if rng.random() < 0.05:
            length = _index(rng, (2,), dtype, 0, 3)
        unit = str(rng.choice(["BYTE", "UTF8_CHAR"]))
        cases.append(Case("Substr", {"input": x, "pos": pos, "len": length}, {"unit": unit}))
    return cases


def joins(rng: np.random.Generator, count: int) -> list[Case]:
    cases = []
    for _ in range(count):
        rank = int(rng.integers(0, 4))
        x = texts(rng, shape(rng, rank, max_dim=3), ["", "a", "bc", "héllo", "x y"])
        k = int(rng.integers(0, rank + 1))
        axes = rng.choice(np.arange(-rank, rank), size=k, replace=False) if rank and k else np.array([], int)
        axes = np.array(axes, np.int32)
        if rng.random() < 0.1:
            axes = np.array([rank], np.int32)
        elif rng.random() < 0.1 and rank:
            axes = np.array([0, 0], np.int32)
        elif rng.random() < 0.2 and axes.size == 1:
            axes = axes.reshape(())
        attrs = {"keep_dims": bool(rng.random() < 0.5), "separator": str(rng.choice(["", " ", "||"]))}
        cases.append(Case("ReduceJoin", {"inputs": x, "reduction_indices": axes}, attrs))
    return cases


def formats(rng: np.random.Generator, count: int) -> list[Case]:
    cases = []
    for _ in range(count):
        n = int(rng.integers(0, 3))
        tensors = []
        for _ in range(n):
            dtype = str(
                rng.choice(["float32", "float64", "float16", "int32", "int64", "uint8", "bool", "string"])
            )
            dims = shape(rng, int(rng.integers(0, 4)), max_dim=int(rng.choice([3, 8])))
            if dtype == "string":
                tensors.append(texts(rng, dims, ["a", "it's", 'say "hi"', "tab\there", "\x01\x7f", "é"]))
            else:
                tensors.append(values(rng, dims, dtype))
        placeholder = str(rng.choice(["%s", "{}"]))
        template = "x" + "".join(f" {placeholder} y{i}" for i in range(n))
        if rng.random() < 0.05:
            template += f" {placeholder}"  # one placeholder too many
        attrs = {
            "template": template,
            "placeholder": placeholder,
            "summarize": int(rng.choice([-1, 0, 1, 2, 3])),
        }
        cases.append(Case("StringFormat", {"inputs": tensors}, attrs))
    return cases


def families() -> dict[str, Callable[[np.random.Generator, int], list[Case]]]:
    return {
        "quant_fake": fake_quant,
        "quant_qdq": quantize_and_dequantize,
        "quant_strings": strings,
        "quant_substr": substr,
        "quant_joins": joins,
        "quant_format": formats,
    }
