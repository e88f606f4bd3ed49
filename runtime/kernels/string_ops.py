"""String kernels: hashing to buckets, formatting numbers as text, case, joins, splits and lengths.

What Keras' Hashing, StringLookup (``num_oov_indices`` > 1) and TextVectorization layers and feature
columns (``categorical_column_with_hash_bucket``) leave in a serving graph. Strings are object arrays of
``bytes``; each kernel is one Python call per string, which is what these ops cost in TensorFlow too
relative to the arithmetic around them.

StringToHashBucketFast is TensorFlow's ``Fingerprint64`` (FarmHash) modulo the bucket count, from
pyfarmhash, which computes the same fingerprint. Regexes are in ``regex_ops.py`` (RE2, as TensorFlow).

Splits: StringSplitV2 (``tf.strings.split``), the v1 StringSplit (``tf.compat.v1.string_split``) and
StringNGrams (``tf.strings.ngrams``, TextVectorization's ``ngrams``) over a ragged tensor's flat tokens.

Also here: base64 (web-safe), Substr, ReduceJoin, UnsortedSegmentJoin, StringFormat (``tf.print``'s
summaries), StringToNumber,
and the other hash buckets: StringToHashBucketStrong is SipHash-2-4 under the node's key, and the legacy
StringToHashBucket TensorFlow's own Hash64 (a MurmurHash64A), both computed here in numpy over all strings
at once.
"""

from __future__ import annotations

import base64
import itertools
import re
from collections.abc import Callable
from typing import Any

import farmhash
import numpy as np

from poolserve.proto import types_pb2
from poolserve.runtime.errors import InvalidArgumentError, OutOfRangeError, UnimplementedError
from poolserve.runtime.kernels._common import _bad_attr, _dims, _each, _shape_str, _strings
from poolserve.runtime.kernels.registry import Compute, OpContext, kernel
from poolserve.runtime.node import Node


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


def _sparse_tokens(pieces: list[list[bytes]]) -> tuple[Any, Any, Any]:
    """Tokens per string as TensorFlow's string splits return them: a SparseTensor's indices (row,
    position), values and dense shape (rows, most tokens in a row)."""
    counts = np.array([len(p) for p in pieces], dtype=np.int64)
    rows = np.repeat(np.arange(len(pieces), dtype=np.int64), counts)
    starts = np.cumsum(counts) - counts
    cols = np.arange(rows.size, dtype=np.int64) - np.repeat(starts, counts)
    values = _strings([t for p in pieces for t in p], (rows.size,))
    shape = np.array([len(pieces), int(counts.max()) if counts.size else 0], dtype=np.int64)
    return np.stack([rows, cols], axis=1).reshape(rows.size, 2), values, shape


def _split_inputs(x: Any, sep_t: Any, sep_name: str) -> bytes:
    if x.ndim != 1:
        raise InvalidArgumentError(f"input must be a vector, got shape: {_dims(x.shape)}")
    if sep_t.ndim:
        raise InvalidArgumentError(f"{sep_name} must be a scalar, got shape: {_dims(sep_t.shape)}")
    sep: bytes = sep_t.item()
    return sep


@kernel("StringSplitV2", outputs=3)
def string_split_v2(node: Node) -> Compute:
    maxsplit = node.attr_int("maxsplit", -1)

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        x, sep_t = inputs
        sep = _split_inputs(x, sep_t, "sep")
        if maxsplit == 0:
            pieces = [[s] for s in x.tolist()]
        elif sep:
            pieces = [s.split(sep, maxsplit) for s in x.tolist()]
        else:
            pieces = [_split_whitespace(s, maxsplit) for s in x.tolist()]
        return _sparse_tokens(pieces)

    return compute


@kernel("StringSplit", outputs=3)
def string_split(node: Node) -> Compute:
    """``tf.compat.v1.string_split``: every byte of ``delimiter`` splits, an empty delimiter splits into
    bytes, and an empty string has no tokens (even an empty one)."""
    skip_empty = node.attr_bool("skip_empty", True)

    def split(s: bytes, delimiter: bytes) -> list[bytes]:
        if not s:
            return []
        if not delimiter:
            return [s[i : i + 1] for i in range(len(s))]
        first = delimiter[:1]
        if len(delimiter) > 1:
            s = s.translate(bytes.maketrans(delimiter[1:], first * (len(delimiter) - 1)))
        tokens = s.split(first)
        return [t for t in tokens if t] if skip_empty else tokens

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        x, delimiter_t = inputs
        delimiter = _split_inputs(x, delimiter_t, "delimiter")
        return _sparse_tokens([split(s, delimiter) for s in x.tolist()])

    return compute


@kernel("StringNGrams", outputs=2)
def string_ngrams(node: Node) -> Compute:
    """``tf.strings.ngrams`` over a ragged tensor of tokens (its flat ``data`` and row splits): every
    n-gram of each width in turn, per row; ``pad_width`` pads of ``left_pad``/``right_pad`` at the row's
    ends (-1: width - 1, never more), and ``preserve_short_sequences`` makes a row too short for any
    n-gram one n-gram of all its tokens."""
    separator = node.attr("separator")
    widths = node.attr_ints("ngram_widths")
    left_pad, right_pad = node.attr("left_pad"), node.attr("right_pad")
    pad_width = node.attr_int("pad_width")
    preserve_short = node.attr_bool("preserve_short_sequences")
    if any(w <= 0 for w in widths):
        raise _bad_attr(node, "ngram_widths", "ngram_widths must contain positive values")
    splits_dtype = node.attr_dtype("Tsplits", types_pb2.DT_INT64)

    def padding(width: int) -> int:
        return min(width - 1 if pad_width < 0 else pad_width, width - 1)

    def count(length: int, width: int) -> int:
        return max(0, length + 2 * padding(width) - width + 1)

    def ngrams(tokens: list[bytes], width: int) -> list[bytes]:
        pad = padding(width)
        num = count(len(tokens), width)
        out = []
        for k in range(num):
            left, right = max(0, pad - k), max(0, pad - (num - 1 - k))
            start = 0 if left else k - pad
            words = tokens[start : start + width - left - right]
            out.append(separator.join([left_pad] * left + words + [right_pad] * right))
        return out

    def check(bounds: list[int], size: int) -> None:
        if bounds[0] != 0:
            raise InvalidArgumentError(f"First split value must be 0, got {bounds[0]}")
        for prev, cur in itertools.pairwise(bounds):
            if not prev <= cur <= size:
                raise InvalidArgumentError(f"Invalid split value {cur}, must be in [{prev}, {size}]")
        if bounds[-1] != size:
            raise InvalidArgumentError(
                f"Last split value must be data size. Expected {size}, got {bounds[-1]}"
            )

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        data, splits = inputs
        bounds = splits.reshape(-1).tolist()
        items = data.reshape(-1).tolist()
        if bounds:
            check(bounds, len(items))
        if not items or not bounds:  # TensorFlow's output then: empty strings in the data's shape
            return _strings([b""] * data.size, data.shape), np.zeros(splits.shape, dtype=splits_dtype)
        out: list[bytes] = []
        row_splits = [0]
        for start, end in itertools.pairwise(bounds):
            tokens = items[start:end]
            row = [g for width in widths for g in ngrams(tokens, width)]
            if preserve_short and tokens and not row:
                if pad_width < 0:
                    raise InvalidArgumentError(
                        "Pad width should be >= 0 when preserve_short_sequences is True and ngram_widths "
                        f"are not provided, got {pad_width}"
                    )
                row = ngrams(tokens, len(tokens) + 2 * pad_width)
            out += row
            row_splits.append(len(out))
        return _strings(out, (len(out),)), np.array(row_splits, dtype=splits_dtype)

    return compute


# --- base64, substrings, joins, formatting, numbers, keyed hashes -------------------------------------------

_B64_ALPHABET = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
_B64_TO_STANDARD = bytes.maketrans(b"-_", b"+/")


def _b64decode(s: bytes) -> bytes:
    """TensorFlow's Base64Decode (web-safe alphabet): the padding of the last group is optional and the
    unused low bits of a short group are ignored; a group of one character is refused."""
    if not s:
        return b""
    full = (len(s) - 1) // 4 * 4  # the groups decoded before the last one, which may be short or padded
    head, tail = s[:full], s[full:]
    if head.translate(None, _B64_ALPHABET):
        raise InvalidArgumentError("Invalid character found in base64.")
    remain = len(tail)
    if remain == 4 and tail[3:] == b"=":
        remain = 2 if tail[2:3] == b"=" else 3
    if remain == 1:
        raise InvalidArgumentError("Base64 string length cannot be 1 modulo 4.")
    last = tail[:remain]
    if last.translate(None, _B64_ALPHABET):
        raise InvalidArgumentError("Invalid character found in base64.")
    decoded = base64.b64decode((head + last + b"A" * (4 - remain)).translate(_B64_TO_STANDARD))
    return decoded[: len(decoded) - 4 + remain]


@kernel("DecodeBase64")
def decode_base64(node: Node) -> Compute:
    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        return (_each(inputs[0], _b64decode),)

    return compute


@kernel("EncodeBase64")
def encode_base64(node: Node) -> Compute:
    pad = node.attr_bool("pad", False)

    def encode(s: bytes) -> bytes:
        out = base64.urlsafe_b64encode(s)
        return out if pad else out.rstrip(b"=")

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        return (_each(inputs[0], encode),)

    return compute


def _char_bounds(s: bytes) -> list[int]:
    """Byte offsets where TensorFlow's UTF-8 characters start (0, then every byte that is not a
    continuation byte), and the end: malformed bytes count as characters as TensorFlow counts them."""
    return [0, *(i for i in range(1, len(s)) if s[i] & 0xC0 != 0x80), len(s)] if s else [0]


def _utf8_span(s: bytes, pos: int, length: int) -> tuple[int, int] | None:
    """String_util's ForwardNUTF8CharPositions / BackNUTF8CharPositions: (start, end) in bytes, or None
    when ``pos`` is out of range."""
    bounds = _char_bounds(s)
    chars = len(bounds) - 1
    if pos >= 0:
        if pos > chars:
            return None
        return bounds[pos], bounds[min(chars, pos + max(length, 0))]
    skip = max(-pos - length, 0)  # characters between the substring's end and the string's end
    back = -pos - skip
    if skip > chars or back < 0 or back > chars - skip:
        return None
    return bounds[chars - skip - back], bounds[chars - skip]


@kernel("Substr")
def substr(node: Node) -> Compute:
    utf8 = node.attr_str("unit", "BYTE", choices=("BYTE", "UTF8_CHAR")) == "UTF8_CHAR"

    def cut(s: bytes, pos: int, length: int, where: str) -> bytes:
        if utf8:
            span = _utf8_span(s, pos, length)
            if span is None:
                raise InvalidArgumentError(f"pos {pos} out of range for string at index {where}")
            return s[span[0] : span[1]]
        start = len(s) + pos if pos < 0 else pos
        if not 0 <= start <= len(s):
            text = s.decode("utf-8", "backslashreplace")
            raise InvalidArgumentError(f"pos {pos} out of range for string b'{text}' at index {where}")
        return s[start:] if length < 0 else s[start : start + length]

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        x, pos, length = inputs
        if pos.shape != length.shape:
            raise InvalidArgumentError(
                f"pos and len should have the same shape, got: {_dims(pos.shape)} vs. {_dims(length.shape)}"
            )
        if pos.ndim == 0 or pos.shape == x.shape:
            p = np.broadcast_to(pos, x.shape).ravel().tolist()
            n = np.broadcast_to(length, x.shape).ravel().tolist()
            out = [
                cut(s, a, b, str(i)) for i, (s, a, b) in enumerate(zip(x.ravel().tolist(), p, n, strict=True))
            ]
            return (_strings(out, x.shape),)
        try:
            shape = np.broadcast_shapes(x.shape, pos.shape)
        except ValueError:
            raise InvalidArgumentError(
                f"Incompatible shapes: {_dims(x.shape)} vs. {_dims(pos.shape)}"
            ) from None
        if len(shape) not in (1, 2):
            raise UnimplementedError(f"Substr broadcast not implemented for {len(shape)} dimensions")
        xs, ps, ns = (np.broadcast_to(a, shape).ravel().tolist() for a in (x, pos, length))
        cols = shape[-1]

        def where(i: int) -> str:
            # a byte error of a 2-D broadcast names (row, column); a UTF-8 one names the row only
            if len(shape) == 1:
                return str(i)
            return str(i // cols) if utf8 else f"({i // cols}, {i % cols})"

        out = [cut(s, a, b, where(i)) for i, (s, a, b) in enumerate(zip(xs, ps, ns, strict=True))]
        return (_strings(out, shape),)

    return compute


@kernel("ReduceJoin")
def reduce_join(node: Node) -> Compute:
    keep_dims = node.attr_bool("keep_dims", False)
    separator = node.attr_str("separator", "").encode()

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        x, axes_t = inputs
        axes: list[int] = []
        for a in axes_t.ravel().tolist():
            if not -x.ndim <= a < x.ndim:
                raise OutOfRangeError(f"Invalid reduction dimension {a} for input with {x.ndim} dimension(s)")
            a %= x.ndim
            if a in axes:
                raise InvalidArgumentError(f"Duplicate reduction dimension {a}")
            axes.append(a)
        kept = [d for d in range(x.ndim) if d not in axes]
        # the first axis listed varies fastest in each joined string
        y = x.transpose(kept + axes[::-1])
        out_shape = tuple(x.shape[d] for d in kept)
        rows = (
            y.reshape(int(np.prod(out_shape)), -1)
            if y.size
            else np.empty((int(np.prod(out_shape)), 0), object)
        )
        joined = _strings([separator.join(r) for r in rows.tolist()], out_shape)
        if keep_dims:
            joined = joined.reshape(tuple(1 if d in axes else x.shape[d] for d in range(x.ndim)))
        return (joined,)

    return compute


@kernel("UnsortedSegmentJoin")
def unsorted_segment_join(node: Node) -> Compute:
    """``tf.strings.unsorted_segment_join`` (and ``reduce_join`` over a ragged tensor's rows): the strings of
    each segment joined in input order, a separator only after what is not empty so far; a segment no id
    names is the empty string."""
    separator = node.attr_str("separator", "").encode()

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        x, ids, num_t = inputs
        for d in range(ids.ndim):
            if d >= x.ndim or ids.shape[d] != x.shape[d]:
                raise InvalidArgumentError(
                    f"Segment dimension is {ids.shape[d]} while input dimension is {x.ndim} in rank {d}"
                )
        if num_t.ndim:
            raise InvalidArgumentError(
                f"Number of segments cannot be a tensor, got shape {_shape_str(num_t.shape)}"
            )
        num = int(num_t)
        inner = x.shape[ids.ndim :]
        rows = x.reshape(ids.size, -1) if x.size else np.empty((ids.size, int(np.prod(inner))), object)
        width = int(np.prod(inner))
        out: list[bytes] = [b""] * (num * width)
        for seg, row in zip(ids.ravel().tolist(), rows.tolist(), strict=True):
            if not 0 <= seg < num:
                raise InvalidArgumentError(
                    "segment_ids are not allowed to exceed num_segments or to have negative values."
                )
            for k, item in enumerate(row):
                # TensorFlow adds the separator only after a non-empty string: "", "c" joins to "c"
                acc = out[seg * width + k]
                out[seg * width + k] = acc + separator + item if acc else item
        return (_strings(out, (num, *inner)),)

    return compute


def _float_text(v: Any) -> str:
    """TensorFlow's FloatToBuffer / DoubleToBuffer: %g with 6 (15) digits if that reads back as the same
    value, else 9 (17)."""
    if np.isnan(v):
        return "nan"
    single = v.dtype != np.float64
    short = f"{float(v):.{6 if single else 15}g}"
    if (np.float32(short) if single else float(short)) == v:
        return short
    return f"{float(v):.{9 if single else 17}g}"


_C_ESCAPES = {ord("\n"): "\\n", ord("\r"): "\\r", ord("\t"): "\\t", ord('"'): '\\"', ord("'"): "\\'"}
_C_ESCAPES[ord("\\")] = "\\\\"


def _c_escape(s: bytes) -> str:
    """absl::CEscape: C escapes, other control bytes in octal, bytes past ASCII as they are (held as
    surrogate escapes until the output is encoded)."""
    return "".join(
        _C_ESCAPES.get(b) or (chr(b) if 0x20 <= b < 0x7F else chr(0xDC00 + b) if b >= 0x80 else f"\\{b:03o}")
        for b in s
    )


def _element_text(x: Any) -> Callable[[Any], str]:
    kind = x.dtype.kind
    if kind == "f":
        return lambda v: _float_text(v)
    if kind == "b":
        return lambda v: "1" if v else "0"
    if kind in "iu":
        return lambda v: str(int(v))
    if kind == "O":
        return lambda v: f'"{_c_escape(v)}"'
    return lambda v: "?"


def _summarize(x: Any, summarize: int) -> str:
    """Tensor::SummarizeValue(summarize, print_v2=true), what tf.print and tf.strings.format show:
    ``summarize`` values at each end of every dimension, ``...`` between."""
    limit = x.size if summarize < 0 else min(summarize, x.size)
    if x.dtype.kind not in "fbiuO":  # complex and the rest: TensorFlow prints '?' for each value
        body = " ".join("?" for _ in range(limit)) + ("..." if limit < x.size else "")
        return f"[{body}]" if x.ndim else body
    if x.dtype.kind == "b" and not limit:  # TensorFlow 2.21 prints no bool values as nothing at all
        return ""
    text = _element_text(x)
    if x.ndim == 0:
        return text(x[()]) if limit else "..."
    flat = x.ravel()
    out: list[str] = []

    def spacing(dim: int) -> None:
        out.append(" " if dim == x.ndim - 1 else "\n" * (x.ndim - dim - 1) + " " * (dim + 1))

    def one_dim(dim: int, index: int) -> None:
        if dim == x.ndim:
            out.append(text(flat[index]))
            return
        out.append("[")
        count = x.shape[dim]
        step = int(np.prod(x.shape[dim + 1 :]))
        for i in range(min(limit, count)):
            if i:
                spacing(dim)
            one_dim(dim + 1, index + step * i)
        if count > 2 * limit:
            spacing(dim)
            out.append("...")
        for i in range(max(limit, count - limit), count):
            spacing(dim)
            one_dim(dim + 1, index + step * i)
        out.append("]")

    one_dim(0, 0)
    return "".join(out)


@kernel("StringFormat")
def string_format(node: Node) -> Compute:
    template = node.attr_str("template", "%s")
    placeholder = node.attr_str("placeholder", "%s")
    summarize = node.attr_int("summarize", 3)
    pieces = template.split(placeholder) if placeholder else [template]
    count = len(node.attr_types("T", []))
    if len(pieces) - 1 != count:
        raise _bad_attr(
            node,
            "template",
            f"num placeholders in template and num inputs must match: {len(pieces) - 1} vs. {count}",
        )

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        parts = [pieces[0]]
        for x, piece in zip(inputs, pieces[1:], strict=True):
            parts += [_summarize(x, summarize), piece]
        return (_strings(["".join(parts).encode("utf-8", "surrogateescape")], ()),)

    return compute


_SPACE = b" \t\n\v\f\r"
_DECIMAL = re.compile(rb"[+-]?(?:\d+\.?\d*(?:[eE][+-]?\d+)?|\.\d+(?:[eE][+-]?\d+)?|inf|infinity|nan)", re.I)
_HEX = re.compile(rb"[+-]?0x(?:[0-9a-f]+\.?[0-9a-f]*|\.[0-9a-f]+)(?:p[+-]?\d+)?", re.I)
_SIGNED = re.compile(rb"[+-]?\d+")
_UNSIGNED = re.compile(rb"\+?\d+")


def number_parser(dtype: np.dtype[Any]) -> Callable[[bytes], int | float | None]:
    """TensorFlow's ``SafeStringToNumeric`` for ``dtype`` (also DecodeCSV's): surrounding whitespace
    ignored, an integer in range or a decimal or hex float; None for anything else."""
    info = np.iinfo(dtype) if dtype.kind != "f" else None
    integer = _UNSIGNED if dtype.kind == "u" else _SIGNED

    def parse(s: bytes) -> int | float | None:
        text = s.strip(_SPACE)
        if info is not None:
            if integer.fullmatch(text) and info.min <= int(text) <= info.max:
                return int(text)
        elif _DECIMAL.fullmatch(text):
            return float(text)
        elif _HEX.fullmatch(text):
            return float.fromhex(text.decode())
        return None

    return parse


@kernel("StringToNumber")
def string_to_number(node: Node) -> Compute:
    dtype = node.attr_dtype("out_type", types_pb2.DT_FLOAT)
    if dtype.kind not in "fiu" or dtype == np.float16:
        raise _bad_attr(
            node, "out_type", f"must be float, double, int32, int64, uint32 or uint64, got {dtype}"
        )
    info = np.iinfo(dtype) if dtype.kind != "f" else None
    number = number_parser(dtype)

    def parse(s: bytes) -> Any:
        value = number(s)
        if value is None:
            raise InvalidArgumentError(
                "StringToNumberOp could not correctly convert string: "
                + s.decode("utf-8", "backslashreplace")
            )
        return value

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        (x,) = inputs
        values = [parse(s) for s in x.ravel().tolist()]
        with np.errstate(over="ignore"):  # a float32 past its range is an infinity, as strtof gives
            return (
                np.array(values, dtype=np.float64 if info is None else dtype).astype(dtype).reshape(x.shape),
            )

    return compute


_U64 = np.uint64
_SIP_ROTATIONS = (_U64(13), _U64(32), _U64(16), _U64(21), _U64(17))


def _words(items: list[bytes], suffix: Callable[[bytes], bytes]) -> tuple[Any, Any]:
    """Each string and its ``suffix`` as little-endian 64-bit words, all strings in one array: (words,
    index of each string's first word)."""
    padded = [s + suffix(s) for s in items]
    words = np.frombuffer(b"".join(padded), dtype="<u8").astype(_U64)
    counts = np.array([len(p) // 8 for p in padded], dtype=np.int64)
    return words, np.cumsum(counts) - counts


def _rotl(x: Any, r: Any) -> Any:
    return (x << r) | (x >> (_U64(64) - r))


def _sip_rounds(v: list[Any], k: int, n: int) -> None:
    """``n`` SipRounds on the first ``k`` lanes of the state ``v`` (four uint64 arrays), in place."""
    v0, v1, v2, v3 = (a[:k] for a in v)
    r13, r32, r16, r21, r17 = _SIP_ROTATIONS
    for _ in range(n):
        v0 += v1
        v1[:] = _rotl(v1, r13) ^ v0
        v0[:] = _rotl(v0, r32)
        v2 += v3
        v3[:] = _rotl(v3, r16) ^ v2
        v0 += v3
        v3[:] = _rotl(v3, r21) ^ v0
        v2 += v1
        v1[:] = _rotl(v1, r17) ^ v2
        v2[:] = _rotl(v2, r32)


def siphash24(items: list[bytes], k0: int, k1: int) -> Any:
    """SipHash-2-4 of each string under the key (k0, k1), as uint64: TensorFlow's StrongKeyedHash
    (highwayhash::SipHash). Vectorized over the strings: block j of every string long enough at once."""
    # the last block holds the message's tail and its length modulo 256 in the top byte
    words, first = _words(items, lambda s: bytes(7 - len(s) % 8) + bytes([len(s) & 0xFF]))
    blocks = np.array([len(s) // 8 + 1 for s in items], dtype=np.int64)
    order = np.argsort(
        -blocks, kind="stable"
    )  # the strings with more blocks first: active lanes are a prefix
    first, blocks = first[order], blocks[order]
    n = len(items)
    init = (0x736F6D6570736575, 0x646F72616E646F6D, 0x6C7967656E657261, 0x7465646279746573)
    v = [np.full(n, c ^ key, dtype=_U64) for c, key in zip(init, (k0, k1, k0, k1), strict=True)]
    with np.errstate(over="ignore"):
        for j in range(int(blocks[0]) if n else 0):
            k = int(np.searchsorted(-blocks, -j, side="left"))
            m = words[first[:k] + j]
            v[3][:k] ^= m
            _sip_rounds(v, k, 2)
            v[0][:k] ^= m
        v[2] ^= _U64(0xFF)
        _sip_rounds(v, n, 4)
    out = np.empty(n, dtype=_U64)
    out[order] = v[0] ^ v[1] ^ v[2] ^ v[3]
    return out


def hash64(items: list[bytes], seed: int = 0xDECAFCAFFE) -> Any:
    """TensorFlow's Hash64 (a MurmurHash64A) of each string, as uint64, vectorized like ``siphash24``."""
    m, r = _U64(0xC6A4A7935BD1E995), _U64(47)
    words, first = _words(items, lambda s: bytes(-len(s) % 8))
    sizes = np.array([len(s) for s in items], dtype=np.uint64)
    full = (sizes // _U64(8)).astype(np.int64)
    order = np.argsort(-full, kind="stable")
    first, full, sizes = first[order], full[order], sizes[order]
    with np.errstate(over="ignore"):
        h = _U64(seed) ^ (sizes * m)
        for j in range(int(full[0]) if len(items) else 0):
            lanes = int(np.searchsorted(-full, -j, side="left"))
            k = words[first[:lanes] + j] * m
            k ^= k >> r
            h[:lanes] ^= k * m
            h[:lanes] *= m
        tail = np.nonzero(sizes % _U64(8))[0]
        h[tail] ^= words[first[tail] + full[tail]]
        h[tail] *= m
        h ^= h >> r
        h *= m
        h ^= h >> r
    out = np.empty(len(items), dtype=_U64)
    out[order] = h
    return out


def _buckets(node: Node) -> int:
    buckets = node.attr_int("num_buckets")
    if buckets < 1:
        raise _bad_attr(node, "num_buckets", f"must be at least 1, got {buckets}")
    return buckets


@kernel("StringToHashBucketStrong")
def string_to_hash_bucket_strong(node: Node) -> Compute:
    buckets = _U64(_buckets(node))
    key = node.attr_ints("key")
    if len(key) != 2:
        raise _bad_attr(node, "key", "Key must have 2 elements")
    k0, k1 = (k & 0xFFFFFFFFFFFFFFFF for k in key)

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        (x,) = inputs
        return ((siphash24(x.ravel().tolist(), k0, k1) % buckets).astype(np.int64).reshape(x.shape),)

    return compute


@kernel("StringToHashBucket")
def string_to_hash_bucket(node: Node) -> Compute:
    buckets = _U64(_buckets(node))

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        (x,) = inputs
        return ((hash64(x.ravel().tolist()) % buckets).astype(np.int64).reshape(x.shape),)

    return compute
