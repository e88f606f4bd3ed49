"""String kernels: hashing to buckets, formatting numbers as text, case, joins, regexes and lengths.

What Keras' Hashing, StringLookup (``num_oov_indices`` > 1) and TextVectorization layers and feature
columns (``categorical_column_with_hash_bucket``) leave in a serving graph. Strings are object arrays of
``bytes``; each kernel is one Python call per string, which is what these ops cost in TensorFlow too
relative to the arithmetic around them.

StringToHashBucketFast is TensorFlow's ``Fingerprint64`` (FarmHash) modulo the bucket count, from
pyfarmhash, which computes the same fingerprint. Regexes are RE2's in TensorFlow and Python's ``re`` here:
the two agree on the character classes, alternations and repetitions such layers use; a pattern ``re``
cannot compile is an InvalidArgumentError naming it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import farmhash
import numpy as np

from poolserve.runtime.errors import InvalidArgumentError
from poolserve.runtime.kernels._common import _bad_attr
from poolserve.runtime.kernels.registry import Compute, OpContext, kernel
from poolserve.runtime.node import Node


def _strings(items: list[bytes], shape: tuple[int, ...]) -> np.ndarray:
    out = np.empty(len(items), dtype=object)
    out[:] = items
    return out.reshape(shape)


def _each(x: Any, fn: Callable[[bytes], Any], dtype: Any = object) -> np.ndarray:
    values = [fn(s) for s in x.ravel().tolist()]
    if dtype is object:
        return _strings(values, x.shape)
    return np.array(values, dtype=dtype).reshape(x.shape)


@kernel("StringToHashBucketFast")
def string_to_hash_bucket_fast(node: Node) -> Compute:
    buckets = node.attr_int("num_buckets")
    if buckets < 1:
        raise _bad_attr(node, "num_buckets", f"must be at least 1, got {buckets}")
    fingerprint = farmhash.fingerprint64

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        return (_each(inputs[0], lambda s: fingerprint(s) % buckets, np.int64),)

    return compute


@kernel("AsString")
def as_string(node: Node) -> Compute:
    precision = node.attr_int("precision", -1)
    scientific = node.attr_bool("scientific", False)
    shortest = node.attr_bool("shortest", False)
    width = node.attr_int("width", -1)
    fill = node.attr_str("fill", "")
    if scientific and shortest:
        raise _bad_attr(node, "shortest", "Cannot select both scientific and shortest notation")
    if len(fill) > 1:
        raise _bad_attr(node, "fill", f"Fill string must be one or fewer characters, got {fill!r}")
    # TensorFlow builds a printf format the same way: %[fill][width][.precision](f|e|g), %d for integers
    pad = f"{fill if fill in ('0', '-', ' ', '+', '#') else ''}{width if width > -1 else ''}"
    float_format = (
        f"%{pad}{f'.{precision}' if precision > -1 else ''}{'e' if scientific else 'g' if shortest else 'f'}"
    )
    int_format = f"%{pad}d"

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        (x,) = inputs
        kind = x.dtype.kind
        if kind == "b":
            return (_each(x, lambda v: b"true" if v else b"false"),)
        if kind in "iu":
            if precision > -1 or scientific or shortest:
                raise InvalidArgumentError("precision, scientific and shortest apply to floats only")
            return (_each(x, lambda v: (int_format % v).encode()),)
        if kind == "f":
            return (_each(x, lambda v: (float_format % v).encode()),)
        if kind == "O":
            return (_each(x, lambda v: (f"%{pad}s" % v.decode(errors="replace")).encode()),)
        raise InvalidArgumentError(f"AsString does not take {x.dtype}")

    return compute


def _ascii_case(table: bytes) -> Callable[[Node], Compute]:
    def factory(node: Node) -> Compute:
        encoding = node.attr_str("encoding", "")
        if encoding not in ("", "utf-8"):
            raise _bad_attr(node, "encoding", f"must be '' or 'utf-8', got {encoding!r}")
        upper = table == _UPPER

        def convert(s: bytes) -> bytes:
            if not encoding:  # ASCII letters only, as TensorFlow does without an encoding
                return s.translate(table)
            text = s.decode("utf-8", errors="replace")
            return (text.upper() if upper else text.lower()).encode()

        def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
            return (_each(inputs[0], convert),)

        return compute

    return factory


_LOWER = bytes.maketrans(bytes(range(65, 91)), bytes(range(97, 123)))
_UPPER = bytes.maketrans(bytes(range(97, 123)), bytes(range(65, 91)))
kernel("StringLower")(_ascii_case(_LOWER))
kernel("StringUpper")(_ascii_case(_UPPER))


@kernel("StringJoin")
def string_join(node: Node) -> Compute:
    separator = node.attr_str("separator", "").encode()

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        shapes = {x.shape for x in inputs if x.ndim}
        if len(shapes) > 1:
            raise InvalidArgumentError(
                f"Input shapes do not match: {' vs. '.join(str(list(s)) for s in sorted(shapes))}"
            )
        arrays = np.broadcast_arrays(*inputs)
        joined = [separator.join(parts) for parts in zip(*(a.ravel().tolist() for a in arrays), strict=True)]
        return (_strings(joined, arrays[0].shape),)

    return compute


def _compile(node: Node, pattern: bytes | str) -> re.Pattern[str]:
    text = pattern.decode("utf-8", "surrogateescape") if isinstance(pattern, bytes) else pattern
    try:
        # RE2 matches UTF-8 text, with ASCII-only \w, \d and \b as here
        return re.compile(text, re.ASCII)
    except re.error as e:
        raise InvalidArgumentError(f"Node '{node.name}': invalid pattern {text!r}: {e}") from None


def _text(s: bytes) -> str:
    return s.decode("utf-8", "surrogateescape")


def _replace(rx: re.Pattern[str], rewrite: bytes, replace_global: bool) -> Callable[[bytes], bytes]:
    """RE2's rewrite: \\0-\\9 name groups, \\\\ is a backslash. One naming a group the pattern lacks makes
    TensorFlow leave every string as it is."""
    parts: list[str | int] = []
    text = _text(rewrite)
    i = 0
    while i < len(text):
        c = text[i]
        if c == "\\" and i + 1 < len(text):
            nxt = text[i + 1]
            if nxt.isdigit():
                parts.append(int(nxt))
            elif nxt == "\\":
                parts.append("\\")
            i += 2  # another escape is dropped, as TensorFlow's answers show
            continue
        parts.append(c)
        i += 1
    if any(isinstance(p, int) and p > rx.groups for p in parts):
        return lambda s: s
    count = 0 if replace_global else 1

    def expand(m: re.Match[str]) -> str:
        return "".join(p if isinstance(p, str) else (m.group(p) or "") for p in parts)

    return lambda s: rx.sub(expand, _text(s), count=count).encode("utf-8", "surrogateescape")


@kernel("StaticRegexReplace")
def static_regex_replace(node: Node) -> Compute:
    rx = _compile(node, node.attr_str("pattern"))
    fn = _replace(rx, node.attr_str("rewrite").encode(), node.attr_bool("replace_global", True))

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        return (_each(inputs[0], fn),)

    return compute


@kernel("RegexReplace")
def regex_replace(node: Node) -> Compute:
    replace_global = node.attr_bool("replace_global", True)

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        x, pattern, rewrite = inputs
        if pattern.ndim or rewrite.ndim:
            raise InvalidArgumentError("Pattern and rewrite must be scalars")
        fn = _replace(_compile(node, pattern.item()), rewrite.item(), replace_global)
        return (_each(x, fn),)

    return compute


@kernel("StaticRegexFullMatch")
def static_regex_full_match(node: Node) -> Compute:
    rx = _compile(node, node.attr_str("pattern"))

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        return (_each(inputs[0], lambda s: rx.fullmatch(_text(s)) is not None, bool),)

    return compute


@kernel("RegexFullMatch")
def regex_full_match(node: Node) -> Compute:
    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        x, pattern = inputs
        if pattern.ndim:
            raise InvalidArgumentError("Pattern must be scalar")
        rx = _compile(node, pattern.item())
        return (_each(x, lambda s: rx.fullmatch(_text(s)) is not None, bool),)

    return compute


@kernel("StringLength")
def string_length(node: Node) -> Compute:
    unit = node.attr_str("unit", "BYTE", choices=("BYTE", "UTF8_CHAR"))
    count: Callable[[bytes], int] = (
        len if unit == "BYTE" else (lambda s: len(s.decode("utf-8", errors="replace")))
    )

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        return (_each(inputs[0], count, np.int32),)

    return compute


@kernel("StringStrip")
def string_strip(node: Node) -> Compute:
    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        return (_each(inputs[0], lambda s: s.strip(b" \t\n\v\f\r")),)

    return compute


def _split_whitespace(s: bytes, maxsplit: int) -> list[bytes]:
    """TensorFlow's split on runs of ASCII whitespace: past ``maxsplit`` tokens the rest (perhaps empty)
    is one more."""
    if maxsplit < 0:
        return s.split()
    out: list[bytes] = []
    text = s.lstrip()
    while text:
        token, *rest = text.split(None, 1)
        out.append(token)
        text = rest[0] if rest else b""
        if len(out) == maxsplit:
            out.append(text)
            break
    return out


@kernel("StringSplitV2", outputs=3)
def string_split_v2(node: Node) -> Compute:
    maxsplit = node.attr_int("maxsplit", -1)

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        x, sep_t = inputs
        if x.ndim != 1:
            raise InvalidArgumentError(f"input must be a vector, got shape: {list(x.shape)}")
        if sep_t.ndim:
            raise InvalidArgumentError(f"sep must be a scalar, got shape: {list(sep_t.shape)}")
        sep = sep_t.item()
        if maxsplit == 0:
            pieces = [[s] for s in x.tolist()]
        elif sep:
            pieces = [s.split(sep, maxsplit) for s in x.tolist()]
        else:
            pieces = [_split_whitespace(s, maxsplit) for s in x.tolist()]
        counts = np.array([len(p) for p in pieces], dtype=np.int64)
        rows = np.repeat(np.arange(len(pieces), dtype=np.int64), counts)
        starts = np.cumsum(counts) - counts
        cols = np.arange(rows.size, dtype=np.int64) - np.repeat(starts, counts)
        values = _strings([t for p in pieces for t in p], (rows.size,))
        shape = np.array([len(pieces), int(counts.max()) if counts.size else 0], dtype=np.int64)
        return np.stack([rows, cols], axis=1).reshape(rows.size, 2), values, shape

    return compute
