"""op_fuzz families: string kernels (hash buckets, AsString, case, joins, regexes, lengths)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from op_fuzz import Case, shape, values

WORDS = [
    "",
    "a",
    "cat",
    "The Cat sat, on the DOG!",
    "héllo wörld",
    "  pad  ",
    "x" * 70,
    "a,b;;c",
    "\t12\n",
    "ÀÉÎ",
]


def texts(rng: np.random.Generator, dims: tuple[int, ...]) -> np.ndarray:
    n = int(np.prod(dims)) if dims else 1
    out = np.empty(n, dtype=object)
    out[:] = [WORDS[int(i)].encode() for i in rng.integers(0, len(WORDS), size=n)]
    return out.reshape(dims)


def strings(rng: np.random.Generator, count: int) -> list[Case]:
    cases = []
    for _ in range(count):
        x = texts(rng, shape(rng))
        cases.append(
            Case(
                "StringToHashBucketFast", {"input": x}, {"num_buckets": int(rng.choice([1, 7, 1000, 2**62]))}
            )
        )
        cases.append(Case("StringLower", {"input": x}, {"encoding": str(rng.choice(["", "utf-8"]))}))
        cases.append(Case("StringUpper", {"input": x}, {"encoding": str(rng.choice(["", "utf-8"]))}))
        cases.append(Case("StringLength", {"input": x}, {"unit": str(rng.choice(["BYTE", "UTF8_CHAR"]))}))
        cases.append(Case("StringStrip", {"input": x}))
        pattern = str(
            rng.choice(
                [
                    r"[^\w\s]",
                    r"\s+",
                    r"(a)(t)",
                    r"cat|dog",
                    r"^\s*",
                    r"[!\"#$%&()\*\+,-\./:;<=>?@\[\\\]^_`{|}~']",
                ]
            )
        )
        rewrite = str(rng.choice(["", " ", r"\2\1", "<\\0>"]))
        cases.append(
            Case(
                "StaticRegexReplace",
                {"input": x},
                {"pattern": pattern, "rewrite": rewrite, "replace_global": bool(rng.random() < 0.7)},
            )
        )
        cases.append(Case("StaticRegexFullMatch", {"input": x}, {"pattern": pattern}))
        y = texts(rng, x.shape if rng.random() < 0.8 else ())
        cases.append(Case("StringJoin", {"inputs": [x, y]}, {"separator": str(rng.choice(["", " ", "||"]))}))
        dtype = str(rng.choice(["int32", "int64", "float32", "float64", "bool", "int8"]))
        v = values(rng, shape(rng), dtype)
        attrs: dict[str, object] = {}
        if dtype.startswith("float"):
            r = rng.random()
            if r < 0.25:
                attrs["shortest"] = True
            elif r < 0.5:
                attrs["scientific"] = True
            if rng.random() < 0.5:
                attrs["precision"] = int(rng.integers(0, 8))
        if rng.random() < 0.4:
            attrs["width"] = int(rng.integers(0, 12))
            attrs["fill"] = str(rng.choice(["", "0", " "]))
        cases.append(Case("AsString", {"input": v}, attrs))
    return cases


def splits(rng: np.random.Generator, count: int) -> list[Case]:
    cases = []
    for _ in range(count):
        x = texts(rng, (int(rng.integers(0, 5)),))
        sep = np.array(str(rng.choice(["", " ", ",", ";;", "a"])).encode(), dtype=object)
        cases.append(
            Case("StringSplitV2", {"input": x, "sep": sep}, {"maxsplit": int(rng.choice([-1, -1, 0, 1, 2]))})
        )
    return cases


def _partition(rng: np.random.Generator, nrows: int, kind: str) -> tuple[np.ndarray, int]:
    lengths = rng.integers(0, 4, size=nrows)
    total = int(lengths.sum())
    if kind == "ROW_SPLITS":
        return np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64), total
    return np.repeat(np.arange(nrows), lengths).astype(np.int64), total


def ragged(rng: np.random.Generator, count: int) -> list[Case]:
    cases = []
    for _ in range(count * 2):
        kind = str(rng.choice(["ROW_SPLITS", "VALUE_ROWIDS"]))
        depth = int(rng.integers(1, 3))
        nrows = int(rng.integers(0, 5))
        parts, n = [], nrows
        for _ in range(depth):
            part, n = _partition(rng, n, kind)
            parts.append(part)
        inner = tuple(int(d) for d in rng.integers(1, 3, size=int(rng.integers(0, 2))))
        dtype = str(rng.choice(["float32", "int64", "int32", "string"]))
        vals = texts(rng, (n, *inner)) if dtype == "string" else values(rng, (n, *inner), dtype, edge=False)
        default = texts(rng, ()) if dtype == "string" else values(rng, (), dtype, edge=False)
        rank = 1 + depth + len(inner)
        dims = [-1] * rank
        for i in range(1 + depth):
            if rng.random() < 0.4:
                dims[i] = int(rng.integers(0, 5))
        types = ["ROW_SPLITS"] * depth
        tensors = parts
        if kind == "VALUE_ROWIDS":
            types = ["FIRST_DIM_SIZE"] + ["VALUE_ROWIDS"] * depth
            tensors = [np.array(nrows, np.int64), *parts]
        shape_t = np.array(dims, np.int64) if rng.random() < 0.8 else np.array(-1, np.int64)
        cases.append(
            Case(
                "RaggedTensorToTensor",
                {
                    "shape": shape_t,
                    "values": vals,
                    "default_value": default,
                    "row_partition_tensors": tensors,
                },
                {"row_partition_types": types},
            )
        )
    return cases


def families() -> dict[str, Callable[[np.random.Generator, int], list[Case]]]:
    return {"strings": strings, "splits": splits, "ragged": ragged}
