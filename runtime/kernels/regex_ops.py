"""Regular expressions: StaticRegexReplace, RegexReplace, StaticRegexFullMatch, RegexFullMatch.

TensorFlow matches with RE2, and so does this module, through google-re2 (the RE2 library's own Python
binding): POSIX classes (``[[:punct:]]``), Unicode classes (``\\p{L}``, ``\\pN``, scripts), ``\\x{e9}``,
``\\Q...\\E``, ``\\C``, ``\\z``, flags anywhere in a pattern (``(?i)``, ``(?U)``), leftmost-first matching
on the UTF-8 bytes, and RE2's error messages for a pattern it refuses. Python's ``re`` differs on each of
those, some silently (a Keras TextVectorization standardizing with ``[[:punct:]]`` gave other token ids).

The binding has no RE2::GlobalReplace or RE2::Replace, so ``_replace`` redoes them over RE2's own match
(``search`` at a start position is RE2::Match on the whole text): an empty match right after the previous
match is skipped by one UTF-8 character (one byte where the text is not UTF-8), a rewrite naming a group the
pattern lacks changes nothing, and a rewrite with an escape other than ``\\0``-``\\9`` and ``\\\\`` is cut
there (GlobalReplace keeps what was written before it; Replace leaves the string as it was).

Version skew: TensorFlow 2.21 builds an RE2 of early 2023 (Unicode 15.0), google-re2 a newer one. The newer
RE2 also accepts ``(?<name>...)`` groups, which TensorFlow's refuses ("invalid perl operator: (?<"), as this
module does too; and its tables know the 627 code points Unicode 15.1 added (CJK extension I at
U+2EBF0-U+2EE5D, U+2FFC-U+2FFF, U+31EF), which TensorFlow's ``\\p{L}``, ``\\p{Han}`` and ``\\pS`` do not
match.

A pattern RE2 refuses is an InvalidArgumentError when the node runs, as in TensorFlow (whose kernel fails
when it is constructed, at the first run that needs it): a graph whose other outputs do not need the node
still serves them. Compiled patterns are kept per node: the static ops' when the graph is loaded, the
dynamic ops' last pattern (TensorFlow's CachedRE2 does the same).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import re2

from poolserve.runtime.errors import InvalidArgumentError
from poolserve.runtime.kernels._common import _dims, _each
from poolserve.runtime.kernels.registry import Compute, OpContext, kernel
from poolserve.runtime.node import Node

Regex = Any  # re2's compiled pattern (the package has no type information)
_OPTIONS = re2.Options()
_OPTIONS.log_errors = False  # the error is raised with RE2's message; RE2 would also print it to stderr


class _BadPattern:
    """A pattern RE2 refused: raises TensorFlow's error whenever it is used."""

    __slots__ = ("message",)

    def __init__(self, message: str) -> None:
        self.message = message

    def fail(self) -> InvalidArgumentError:
        return InvalidArgumentError(self.message)


def _angle_group(pattern: bytes) -> bool:
    """Whether the pattern opens a group with ``(?<`` outside escapes, ``\\Q...\\E`` and character classes."""
    i, n, in_class = 0, len(pattern), False
    while i < n:
        c = pattern[i : i + 1]
        if c == b"\\":
            if pattern[i + 1 : i + 2] == b"Q" and not in_class:
                end = pattern.find(b"\\E", i + 2)
                i = n if end < 0 else end + 2
            else:
                i += 2
        elif in_class:
            if pattern.startswith(b"[:", i):
                end = pattern.find(b":]", i + 2)
                i = i + 1 if end < 0 else end + 2
                continue
            in_class = c != b"]"
            i += 1
        elif c == b"[":
            in_class = True
            i += 1
            i += pattern[i : i + 1] == b"^"
            i += pattern[i : i + 1] == b"]"  # a ']' first in a class is a literal
        elif pattern.startswith(b"(?<", i):
            return True
        else:
            i += 1
    return False


def compile_pattern(pattern: bytes) -> Regex | _BadPattern:
    """RE2 with TensorFlow's options (RE2's defaults: UTF-8, leftmost-first), or why it was refused, in
    TensorFlow's words."""
    try:
        rx = re2.compile(pattern, _OPTIONS)
        error = ""
    except re2.error as e:
        arg = e.args[0] if e.args else b""
        error = arg.decode("utf-8", "replace") if isinstance(arg, bytes) else str(arg)
    if error.startswith("invalid perl operator: (?<") or (not error and _angle_group(pattern)):
        error = "invalid perl operator: (?<"  # TensorFlow's RE2 has no (?<name>...) and one message for (?<
    if error:
        text = pattern.decode("utf-8", "backslashreplace")
        return _BadPattern(f"Invalid pattern: {text}, error: {error}")
    return rx


def _fullrune_step(s: bytes, p: int) -> int:
    """How far RE2::GlobalReplace steps over an empty match at ``p``: one UTF-8 character as RE2's
    chartorune decodes it (lead byte, continuation bytes, no overlong form, at most U+10FFFF), else one
    byte."""
    c = s[p] if p < len(s) else 0
    need = 1 if c < 0x80 else 2 if c < 0xE0 else 3 if c < 0xF0 else 4
    if c < 0xC0 or c >= 0xF8 or p + need > len(s):
        return 1
    value = c & (0x7F >> need)
    for b in s[p + 1 : p + need]:
        if b & 0xC0 != 0x80:
            return 1
        value = value << 6 | b & 0x3F
    least = (0, 0x80, 0x800, 0x10000)[need - 1]
    return need if least <= value <= 0x10FFFF else 1


class _Rewrite:
    """An RE2 rewrite string: literal bytes and group numbers; ``complete`` is False when it holds an
    escape RE2::Rewrite refuses (it stops there)."""

    __slots__ = ("complete", "max_group", "parts")

    def __init__(self, rewrite: bytes) -> None:
        self.parts: list[bytes | int] = []
        self.complete = True
        self.max_group = 0  # RE2::MaxSubmatch: the largest \digit in the whole rewrite
        i = rewrite.find(b"\\")
        while 0 <= i < len(rewrite) - 1:
            if 0x30 <= rewrite[i + 1] <= 0x39:
                self.max_group = max(self.max_group, rewrite[i + 1] - 0x30)
            i = rewrite.find(b"\\", i + 2)
        literal = bytearray()
        i = 0
        while i < len(rewrite):
            c = rewrite[i]
            if c != 0x5C:
                literal.append(c)
                i += 1
                continue
            nxt = rewrite[i + 1] if i + 1 < len(rewrite) else -1
            if 0x30 <= nxt <= 0x39:
                self.parts += [bytes(literal), nxt - 0x30]
                literal.clear()
            elif nxt == 0x5C:
                literal.append(0x5C)
            else:
                self.complete = False
                break
            i += 2
        self.parts.append(bytes(literal))

    def expand(self, s: bytes, m: Any) -> bytes:
        out = []
        for part in self.parts:
            if isinstance(part, bytes):
                out.append(part)
            else:
                start, end = m.span(part)
                if start >= 0:
                    out.append(s[start:end])
        return b"".join(out)


def _replace(rx: Regex, rewrite: _Rewrite, replace_global: bool) -> Callable[[bytes], bytes]:
    if rewrite.max_group > rx.groups:
        return lambda s: s  # RE2 refuses to rewrite with a group the pattern lacks

    def replace_first(s: bytes) -> bytes:
        m = rx.search(s)
        if m is None or not rewrite.complete:
            return s
        start, end = m.span()
        return s[:start] + rewrite.expand(s, m) + s[end:]

    def replace_all(s: bytes) -> bytes:
        out: list[bytes] = []
        p, last_end, count, n = 0, -1, 0, len(s)
        while p <= n:
            m = rx.search(s, p)
            if m is None:
                break
            start, end = m.span()
            if p < start:
                out.append(s[p:start])
            if start == end == last_end:  # no empty match where the previous one ended
                step = _fullrune_step(s, p)
                out.append(s[p : p + step])
                p += step
                continue
            out.append(rewrite.expand(s, m))
            p = last_end = end
            count += 1
        if not count:
            return s
        out.append(s[p:])
        return b"".join(out)

    return replace_all if replace_global else replace_first


def _scalar(t: Any, what: str) -> bytes:
    if t.ndim:
        raise InvalidArgumentError(f"{what} must be scalar, but received {_dims(t.shape)}")
    value: bytes = t.item()
    return value


def _last_compiled() -> Callable[[bytes], Regex]:
    """The dynamic ops' cache: the last pattern a node compiled."""
    last: list[Any] = [None, None]

    def get(pattern: bytes) -> Regex:
        key, rx = last
        if key != pattern:
            rx = compile_pattern(pattern)
            last[:] = pattern, rx
        if isinstance(rx, _BadPattern):
            raise rx.fail()
        return rx

    return get


@kernel("StaticRegexReplace")
def static_regex_replace(node: Node) -> Compute:
    rx = compile_pattern(node.attr("pattern"))
    rewrite = _Rewrite(node.attr("rewrite"))
    replace_global = node.attr_bool("replace_global", True)
    fn = None if isinstance(rx, _BadPattern) else _replace(rx, rewrite, replace_global)

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        if fn is None:
            raise rx.fail()
        return (_each(inputs[0], fn),)

    return compute


@kernel("RegexReplace")
def regex_replace(node: Node) -> Compute:
    replace_global = node.attr_bool("replace_global", True)
    compiled = _last_compiled()

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        x, pattern, rewrite = inputs
        rx = compiled(_scalar(pattern, "Pattern"))
        fn = _replace(rx, _Rewrite(_scalar(rewrite, "Rewrite")), replace_global)
        return (_each(x, fn),)

    return compute


@kernel("StaticRegexFullMatch")
def static_regex_full_match(node: Node) -> Compute:
    rx = compile_pattern(node.attr("pattern"))

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        if isinstance(rx, _BadPattern):
            raise rx.fail()
        return (_each(inputs[0], lambda s: rx.fullmatch(s) is not None, bool),)

    return compute


@kernel("RegexFullMatch")
def regex_full_match(node: Node) -> Compute:
    compiled = _last_compiled()

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        x, pattern = inputs
        rx = compiled(_scalar(pattern, "Pattern"))
        return (_each(x, lambda s: rx.fullmatch(s) is not None, bool),)

    return compute
