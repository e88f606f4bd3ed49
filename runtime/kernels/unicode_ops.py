"""Unicode: UnicodeDecode, UnicodeDecodeWithOffsets, UnicodeEncode, UnicodeTranscode, UnicodeScript.

What ``tf.strings.unicode_decode``/``unicode_split``/``unicode_encode`` and Keras' TextVectorization with
``split="character"`` leave in a serving graph. TensorFlow decodes with ICU's converters, which replace a
malformed sequence one *maximal subpart* at a time (the longest prefix of a valid sequence, else one byte:
``\\xe6\\x97a`` is U+FFFD and ``a``, ``\\xed\\xa0\\x80`` three U+FFFD), as Python's UTF-8 codec does;
``errors`` then keeps the replacement character (``replace``), drops it (``ignore``, its bytes still counted
in the next character's offset) or fails (``strict``). ``replace_control_characters`` treats U+0000-U+001F
as malformed, except that ``strict`` replaces them instead of failing.

Decoding reads UTF-8 (valid strings through Python's codec, the rest byte by byte), UTF-16 and UTF-32 of
either byte order, ISO-8859-1 and US-ASCII, by the names ICU matches (case, ``-`` and ``_`` ignored); ICU's
other converters are refused. UnicodeScript is ICU's ``uscript_getScript`` from a table made from
TensorFlow's answers (``_unicode_scripts.py``).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import numpy as np

from poolserve.proto import types_pb2
from poolserve.runtime.errors import InvalidArgumentError
from poolserve.runtime.kernels import _unicode_scripts
from poolserve.runtime.kernels._common import _bad_attr, _strings
from poolserve.runtime.kernels.registry import Compute, OpContext, kernel
from poolserve.runtime.node import Node

# One decoded character: its code point, how many bytes it took, and whether those bytes were malformed.
Char = tuple[int, int, bool]
_FFFD = 0xFFFD
_MALFORMED = "Invalid formatting on input string"


def _utf8_chars(s: bytes) -> list[Char]:
    """UTF-8 with ICU's (and Python's) maximal-subpart replacement."""
    out: list[Char] = []
    i, n = 0, len(s)
    while i < n:
        b = s[i]
        if b < 0x80:
            out.append((b, 1, False))
            i += 1
            continue
        # the sequence's length, and the range of its second byte (which rules out overlong forms,
        # surrogates and code points past U+10FFFF); later bytes are 80..BF
        if 0xC2 <= b <= 0xDF:
            need, low, high = 2, 0x80, 0xBF
        elif 0xE0 <= b <= 0xEF:
            need, low, high = 3, 0xA0 if b == 0xE0 else 0x80, 0x9F if b == 0xED else 0xBF
        elif 0xF0 <= b <= 0xF4:
            need, low, high = 4, 0x90 if b == 0xF0 else 0x80, 0x8F if b == 0xF4 else 0xBF
        else:
            out.append((_FFFD, 1, True))
            i += 1
            continue
        value, j = b & (0x7F >> need), i + 1
        while j < min(i + need, n) and low <= s[j] <= high:
            value = value << 6 | s[j] & 0x3F
            j += 1
            low, high = 0x80, 0xBF
        out.append((value, need, False) if j - i == need else (_FFFD, j - i, True))
        i = j
    return out


def _utf16_chars(s: bytes, order: str) -> list[Char]:
    out: list[Char] = []
    units = len(s) // 2
    u = np.frombuffer(s[: units * 2], dtype=f"{order}u2").tolist()
    i = 0
    while i < units:
        c = u[i]
        if 0xD800 <= c < 0xDC00 and i + 1 < units and 0xDC00 <= u[i + 1] < 0xE000:
            out.append((0x10000 + ((c - 0xD800) << 10) + u[i + 1] - 0xDC00, 4, False))
            i += 2
            continue
        if 0xD800 <= c < 0xDC00 and i + 1 == units and len(s) % 2:
            # a lead surrogate cut short by the end of the input: one truncated character with the odd byte
            out.append((_FFFD, 3, True))
            return out
        out.append((_FFFD, 2, True) if 0xD800 <= c < 0xE000 else (c, 2, False))
        i += 1
    if len(s) % 2:
        out.append((_FFFD, 1, True))
    return out


def _utf32_chars(s: bytes, order: str) -> list[Char]:
    units = len(s) // 4
    out: list[Char] = [
        (_FFFD, 4, True) if c > 0x10FFFF or 0xD800 <= c < 0xE000 else (c, 4, False)
        for c in np.frombuffer(s[: units * 4], dtype=f"{order}u4").tolist()
    ]
    if len(s) % 4:
        out.append((_FFFD, len(s) % 4, True))
    return out


_DECODERS: dict[str, Callable[[bytes], list[Char]]] = {
    "utf8": _utf8_chars,
    "utf16be": lambda s: _utf16_chars(s, ">"),
    "utf16le": lambda s: _utf16_chars(s, "<"),
    "utf32be": lambda s: _utf32_chars(s, ">"),
    "utf32le": lambda s: _utf32_chars(s, "<"),
    "iso88591": lambda s: [(b, 1, False) for b in s],
    "latin1": lambda s: [(b, 1, False) for b in s],
    "usascii": lambda s: [(b, 1, False) if b < 0x80 else (_FFFD, 1, True) for b in s],
    "ascii": lambda s: [(b, 1, False) if b < 0x80 else (_FFFD, 1, True) for b in s],
}


class _Errors:
    """The ``errors``, ``replacement_char`` and ``replace_control_characters`` attrs, checked as
    TensorFlow's GetErrorOptions does."""

    def __init__(self, node: Node) -> None:
        self.policy = node.attr_str("errors", "replace")
        if self.policy not in ("strict", "replace", "ignore"):
            raise _bad_attr(node, "errors", "errors policy must be one of 'strict', 'replace', or 'ignore'")
        self.replacement = node.attr_int("replacement_char", _FFFD)
        if not 0 <= self.replacement <= 0x10FFFF:
            raise _bad_attr(node, "replacement_char", "replacement_char out of unicode codepoint range")
        self.controls = node.attr_bool("replace_control_characters", False)


def _decoder(node: Node) -> Callable[[bytes], list[Char]]:
    encoding = node.attr_str("input_encoding")
    decode = _DECODERS.get("".join(c for c in encoding.lower() if c.isalnum()))
    if decode is None:
        raise _bad_attr(
            node,
            "input_encoding",
            f"Could not create converter for input encoding: {encoding} (poolserve decodes UTF-8, "
            "UTF-16-BE/LE, UTF-32-BE/LE, ISO-8859-1 and US-ASCII)",
        )
    return decode


def _utf8_fast(items: list[bytes]) -> tuple[Any, Any, Any] | None:
    """Every string valid UTF-8: (characters per string, code points, each one's byte offset in its
    string), through Python's codec; None when one is not valid."""
    try:
        texts = [s.decode("utf-8") for s in items]
    except UnicodeDecodeError:
        return None
    counts = np.array([len(t) for t in texts], dtype=np.int64)
    points = np.frombuffer("".join(texts).encode("utf-32-le"), dtype="<u4").astype(np.int32)
    sizes = 1 + (points >= 0x80) + (points >= 0x800) + (points >= 0x10000).astype(np.int64)
    lengths = np.array([len(s) for s in items], dtype=np.int64)
    string_starts = np.repeat(np.cumsum(lengths) - lengths, counts)
    return counts, points, np.cumsum(sizes) - sizes - string_starts


def _unicode_decode(node: Node, offsets: bool) -> Compute:
    errors = _Errors(node)
    decode = _decoder(node)
    splits_dtype = node.attr_dtype("Tsplits", types_pb2.DT_INT64)
    if splits_dtype not in (np.int32, np.int64):
        raise _bad_attr(node, "Tsplits", f"must be int32 or int64, got {splits_dtype}")
    # valid UTF-8 decodes in one pass of Python's codec, unless control characters are to be replaced
    fast = decode is _utf8_chars and not errors.controls

    def chars(s: bytes) -> tuple[list[int], list[int]]:
        points: list[int] = []
        starts: list[int] = []
        offset = 0
        for cp, size, malformed in decode(s):
            if malformed and errors.policy == "strict":
                raise InvalidArgumentError(_MALFORMED)
            if malformed or (errors.controls and cp <= 0x1F):
                if errors.policy == "ignore":
                    offset += size
                    continue
                cp = errors.replacement
            points.append(cp)
            starts.append(offset)
            offset += size
        return points, starts

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        items = inputs[0].ravel().tolist()
        decoded = _utf8_fast(items) if fast else None
        if decoded is not None:
            counts, points, starts = decoded
        else:
            rows = [chars(s) for s in items]
            counts = np.array([len(p) for p, _ in rows], dtype=np.int64)
            points = np.array([c for p, _ in rows for c in p], dtype=np.int32)
            starts = np.array([o for _, st in rows for o in st], dtype=np.int64)
        splits = np.concatenate([[0], np.cumsum(counts)]).astype(splits_dtype)
        return (splits, points, starts) if offsets else (splits, points)

    return compute


@kernel("UnicodeDecode", outputs=2)
def unicode_decode(node: Node) -> Compute:
    return _unicode_decode(node, offsets=False)


@kernel("UnicodeDecodeWithOffsets", outputs=3)
def unicode_decode_with_offsets(node: Node) -> Compute:
    return _unicode_decode(node, offsets=True)


def _check_splits(values: Any, splits: Any) -> list[int]:
    """UnicodeEncode's checks of a ragged tensor's row splits, in TensorFlow's order and words."""
    if values.ndim != 1 or splits.ndim != 1:
        raise InvalidArgumentError("Both the input_tensor and input_splits should be of rank 1. ")
    bounds: list[int] = splits.tolist()
    if not bounds:
        raise InvalidArgumentError(
            "Input_splits should contain elements, but given input_values has 0 elements"
        )
    if bounds[0] != 0:
        raise InvalidArgumentError("First value in input_splits must be zero.")
    if bounds[-1] != values.shape[0]:
        raise InvalidArgumentError("Last value in input_splits must be equal to length of input_tensor.")
    for prev, cur in itertools.pairwise(bounds):
        if cur > values.shape[0]:
            raise InvalidArgumentError(
                "Values in input_splits must be less than or equal to input_tensor length."
            )
        if cur < prev:
            raise InvalidArgumentError("Values in input_splits must be equal or in ascending order.")
    return bounds


def _output_codec(node: Node) -> str:
    codec = {"UTF-8": "utf-8", "UTF-16-BE": "utf-16-be", "UTF-32-BE": "utf-32-be"}.get(
        node.attr_str("output_encoding")
    )
    if codec is None:
        raise _bad_attr(node, "output_encoding", "must be one of UTF-8, UTF-16-BE, UTF-32-BE")
    return codec


def _encoder(codec: str, errors: _Errors) -> Callable[[str], bytes]:
    # only a replacement character can put a surrogate in the text: UTF-8 writes it as U+FFFD, as ICU does
    if codec == "utf-8" and 0xD800 <= errors.replacement < 0xE000:
        surrogate = chr(errors.replacement)
        return lambda text: text.replace(surrogate, "\ufffd").encode(codec)
    return lambda text: text.encode(codec, "surrogatepass")


@kernel("UnicodeTranscode")
def unicode_transcode(node: Node) -> Compute:
    errors = _Errors(node)
    decode = _decoder(node)
    encode = _encoder(_output_codec(node), errors)
    fast = decode is _utf8_chars and not errors.controls

    def transcode(s: bytes) -> tuple[bytes, bool]:
        """(s in the output encoding, whether it held a malformed or replaced character)."""
        if fast:
            try:
                return encode(s.decode("utf-8")), False
            except UnicodeDecodeError:
                pass
        points: list[int] = []
        flagged = False
        for cp, _, malformed in decode(s):
            if malformed or (errors.controls and cp <= 0x1F):
                flagged = True
                if errors.policy == "ignore":
                    continue
                cp = errors.replacement
            points.append(cp)
        return encode("".join(map(chr, points))), flagged

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        (x,) = inputs
        done = [transcode(s) for s in x.ravel().tolist()]
        # strict fails on a malformed character, and on a control character it was told to replace
        if errors.policy == "strict" and any(flagged for _, flagged in done):
            raise InvalidArgumentError(_MALFORMED)
        return (_strings([out for out, _ in done], x.shape),)

    return compute


@kernel("UnicodeEncode")
def unicode_encode(node: Node) -> Compute:
    codec = _output_codec(node)
    errors = _Errors(node)
    encode = _encoder(codec, errors)

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        values, splits = inputs
        bounds = np.array(_check_splits(values, splits), dtype=np.int64)
        points = values.astype(np.int64)
        bad = (points < 0) | (points > 0x10FFFF) | ((points >= 0xD800) & (points < 0xE000))
        if bad.any():
            if errors.policy == "strict":
                raise InvalidArgumentError("Code point is out of range for Unicode, or is a surrogate.")
            if errors.policy == "replace":
                points = np.where(bad, errors.replacement, points)
            else:
                bounds = np.concatenate([[0], np.cumsum(~bad)])[bounds]
                points = points[~bad]
        text = "".join(map(chr, points.tolist()))
        out = [encode(text[a:b]) for a, b in itertools.pairwise(bounds.tolist())]
        return (_strings(out, (len(out),)),)

    return compute


def _script_runs() -> tuple[Any, Any]:
    pairs = [pair.split(":") for pair in _unicode_scripts.RUNS.split()]
    starts = np.array([int(start, 16) for start, _ in pairs], dtype=np.int64)
    return starts, np.array([int(code, 16) for _, code in pairs], dtype=np.int32)


_RUN_STARTS, _RUN_CODES = _script_runs()


@kernel("UnicodeScript")
def unicode_script(node: Node) -> Compute:
    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        (x,) = inputs
        points = x.astype(np.int64)
        codes = _RUN_CODES[np.searchsorted(_RUN_STARTS, points, side="right") - 1]
        return (np.where((points < 0) | (points > 0x10FFFF), np.int32(-1), codes).astype(np.int32),)

    return compute
