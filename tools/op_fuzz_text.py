"""op_fuzz families: text kernels on random bytes and attrs (regexes, n-grams, v1 splits, Unicode,
RaggedBincount)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from op_fuzz import Case

# pieces of text: ASCII, punctuation, multi-byte characters, control characters, and malformed UTF-8
PIECES = [
    b"a", b"Z", b" ", b"  ", b"\t", b"\n", b".", b",", b"!", b"-", b"_", b"7", b"\x00", b"\x01", b"\x1f",
    "é".encode(), "ß".encode(), "日".encode(), "½".encode(), "😀".encode(), "\u0300".encode(), "Ω".encode(),
    b"\xff", b"\x80", b"\xc0\x80", b"\xe6\x97", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xf0\x9f\x98",
    b"\xc3",
]  # fmt: skip
PATTERNS = [
    r"[[:punct:]]", r"[[:alpha:]]+", r"\pL", r"\p{Han}|\pN", r"\w+", r"\s*", r"x*", r"", r".", r"\C",
    r"(?i)é|ß", r"[^[:ascii:]]", r"(a)|(Z)", r"\b", r"(?U).+", r"^\W", r"\z", r"a|", r"[\x{0}-\x{1f}]",
]  # fmt: skip
REWRITES = ["", "<\\0>", "\\1\\2", "\\\\", "-", "x\\qy", "\\0\\0"]


def text(rng: np.random.Generator, malformed: bool = True) -> bytes:
    pool = PIECES if malformed else PIECES[:22]
    return b"".join(pool[int(i)] for i in rng.integers(0, len(pool), size=int(rng.integers(0, 7))))


def texts(rng: np.random.Generator, n: int, malformed: bool = True) -> np.ndarray:
    out = np.empty(n, dtype=object)
    out[:] = [text(rng, malformed) for _ in range(n)]
    return out


def regexes(rng: np.random.Generator, count: int) -> list[Case]:
    cases = []
    for _ in range(count):
        x = texts(rng, int(rng.integers(0, 6)))
        pattern = str(rng.choice(PATTERNS))
        rewrite = str(rng.choice(REWRITES))
        replace_global = bool(rng.random() < 0.7)
        attrs = {"pattern": pattern, "rewrite": rewrite, "replace_global": replace_global}
        cases.append(Case("StaticRegexReplace", {"input": x}, attrs))
        cases.append(
            Case(
                "RegexReplace",
                {
                    "input": x,
                    "pattern": np.array(pattern.encode(), object),
                    "rewrite": np.array(rewrite.encode(), object),
                },
                {"replace_global": replace_global},
            )
        )
        cases.append(Case("StaticRegexFullMatch", {"input": x}, {"pattern": pattern}))
    return cases


def ragged(rng: np.random.Generator, nrows: int, max_len: int = 4) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(rng.integers(0, max_len + 1, size=nrows))]).astype(np.int64)


def ngrams(rng: np.random.Generator, count: int) -> list[Case]:
    cases = []
    for _ in range(count):
        splits = ragged(rng, int(rng.integers(0, 4)))
        data = texts(rng, int(splits[-1]))
        widths = sorted({int(w) for w in rng.integers(1, 5, size=int(rng.integers(0, 3)))})
        attrs = {
            "separator": str(rng.choice([" ", "", "|", "▁"])),
            "ngram_widths": widths,
            "left_pad": str(rng.choice(["", "<s>"])),
            "right_pad": str(rng.choice(["", "</s>"])),
            "pad_width": int(rng.choice([-1, 0, 1, 2, 5])),
            "preserve_short_sequences": bool(rng.random() < 0.4),
        }
        cases.append(Case("StringNGrams", {"data": data, "data_splits": splits}, attrs))
    return cases


def split_v1(rng: np.random.Generator, count: int) -> list[Case]:
    cases = []
    for _ in range(count):
        x = texts(rng, int(rng.integers(0, 5)))
        delimiter = np.array(bytes(rng.choice([b"", b" ", b",.", b"\xc3", b"a Z"])), dtype=object)
        cases.append(
            Case(
                "StringSplit", {"input": x, "delimiter": delimiter}, {"skip_empty": bool(rng.random() < 0.5)}
            )
        )
    return cases


def unicode(rng: np.random.Generator, count: int) -> list[Case]:
    cases = []
    for _ in range(count):
        x = texts(rng, int(rng.integers(0, 5)))
        errors = str(rng.choice(["replace", "ignore", "strict"]))
        attrs = {
            "input_encoding": str(rng.choice(["UTF-8", "UTF-8", "UTF-16-BE", "UTF-32-BE", "ISO-8859-1"])),
            "errors": errors,
            "replacement_char": int(rng.choice([0xFFFD, 0x3F, 0])),
            "replace_control_characters": bool(rng.random() < 0.3),
        }
        op = str(rng.choice(["UnicodeDecode", "UnicodeDecodeWithOffsets"]))
        cases.append(Case(op, {"input": x}, attrs))
        splits = ragged(rng, int(rng.integers(0, 4)))
        points = rng.choice(
            [0x41, 0xE9, 0x65E5, 0x1F600, 0, -1, 0xD800, 0x110000, 0xFFFE], size=int(splits[-1])
        )
        enc = {
            "output_encoding": str(rng.choice(["UTF-8", "UTF-16-BE", "UTF-32-BE"])),
            "errors": errors,
            "replacement_char": int(rng.choice([0xFFFD, 0x3F])),
        }
        values = points.astype(np.int32)
        cases.append(Case("UnicodeEncode", {"input_values": values, "input_splits": splits}, enc))
        cases.append(Case("UnicodeScript", {"input": rng.integers(-5, 0x110005, size=6).astype(np.int32)}))
    return cases


def ragged_bincount(rng: np.random.Generator, count: int) -> list[Case]:
    cases = []
    for _ in range(count):
        splits = ragged(rng, int(rng.integers(0, 4)), 6)
        idx = str(rng.choice(["int32", "int64"]))
        values = rng.integers(0, 8, size=int(splits[-1])).astype(idx)
        wtype = str(rng.choice(["float32", "float64", "int32", "int64"]))
        weights = (rng.uniform(0, 3, size=values.size) if rng.random() < 0.5 else np.zeros(0)).astype(wtype)
        inputs = {
            "splits": splits,
            "values": values,
            "size": np.array(rng.integers(0, 9), idx),
            "weights": weights,
        }
        cases.append(Case("RaggedBincount", inputs, {"binary_output": bool(rng.random() < 0.3)}))
    return cases


def families() -> dict[str, Callable[[np.random.Generator, int], list[Case]]]:
    return {
        "regexes": regexes,
        "ngrams": ngrams,
        "split_v1": split_v1,
        "unicode": unicode,
        "ragged_bincount": ragged_bincount,
    }
