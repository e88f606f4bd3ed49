"""Writes TensorFlow's answers for the text kernels (dev only): regexes, n-grams, splits, Unicode,
bincounts, and Keras TextVectorization SavedModels.

Run with the TensorFlow environment, not the project's::

    /opt/tfenv/bin/python tools/make_text_fixtures.py

Writes, under ``tests/fixtures/``:

- ``kernels/regex_ops.json``: ``texts``, and per case one regex op (StaticRegexReplace, RegexReplace,
  StaticRegexFullMatch, RegexFullMatch) with its pattern (and rewrite), run by TensorFlow on the texts: its
  ``output``, or its ``error`` (class and message). Patterns sweep RE2's syntax (POSIX and Unicode classes,
  ``\\x{..}``, ``\\Q..\\E``, ``\\C``, flags), empty matches, rewrites RE2 refuses, and patterns RE2 refuses.
- ``kernels/text_ops.json``: per case the NodeDef TensorFlow wrote for one op (text format, inputs named
  ``in0``, ``in1``, ...), the inputs fed, and TensorFlow's outputs or error: StringNGrams, StringSplit,
  UnicodeDecode(WithOffsets), UnicodeEncode, UnicodeScript, RaggedBincount, DenseBincount, Bincount, on
  edge cases (empty strings and rows, malformed UTF-8 under each ``errors`` mode, n-gram widths and
  padding, bad splits).
- ``saved_models/keras3_text/1`` (Keras 3 ``model.export``) and ``saved_models/tf_keras_text/1`` (tf_keras
  ``model.save``): TextVectorization layers side by side on one string input, in int mode (standardizing
  with Keras' default pattern and with ``[[:punct:]]``, character split), multi_hot, count (bigrams) and
  tf_idf (tf_keras: three of them); ``keras3_text.json``/``tf_keras_text.json`` hold the inputs and
  TensorFlow's outputs.

Tensors in the JSON files are ``{"dtype", "shape", "data"}`` with ``data`` flat; strings are the bytes
decoded as UTF-8 with ``surrogateescape`` (a malformed byte is a lone surrogate ``\\udcXX``), so the test
gets the bytes back with ``.encode("utf-8", "surrogateescape")``. Re-running rewrites the same files.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import numpy as np
import tensorflow as tf
from google.protobuf import text_format

FIXTURES = Path(__file__).resolve().parent.parent / "tests" / "fixtures"
tf1 = tf.compat.v1


def text(b: bytes) -> str:
    return b.decode("utf-8", "surrogateescape")


def tensor(value: Any) -> dict[str, Any]:
    arr = np.asarray(value)
    if arr.dtype.kind in "OS":
        data: list[Any] = [text(v if isinstance(v, bytes) else v.encode()) for v in arr.ravel().tolist()]
        dtype = "string"
    else:
        data = arr.ravel().tolist()
        dtype = arr.dtype.name
    return {"dtype": dtype, "shape": list(arr.shape), "data": data}


def write_json(path: Path, record: dict[str, Any]) -> None:
    """One key a line, and one item a line of a list (the cases): small, and a case's diff is its line."""
    lines = []
    for key, value in record.items():
        if isinstance(value, list) and value and isinstance(value[0], dict):
            items = ",\n  ".join(json.dumps(v, ensure_ascii=False) for v in value)
            lines.append(f"{json.dumps(key)}: [\n  {items}\n ]")
        elif isinstance(value, dict):
            items = ",\n  ".join(
                f"{json.dumps(k)}: {json.dumps(v, ensure_ascii=False)}" for k, v in value.items()
            )
            lines.append(f"{json.dumps(key)}: {{\n  {items}\n }}")
        else:
            lines.append(f"{json.dumps(key)}: {json.dumps(value, ensure_ascii=False)}")
    out = "{\n " + ",\n ".join(lines) + "\n}\n"
    # the file is UTF-8 text: a malformed byte's lone surrogate stays escaped
    path.write_text(re.sub("[\udc80-\udcff]", lambda m: f"\\u{ord(m.group()):04x}", out), encoding="utf-8")


def strings(*items: bytes | str) -> np.ndarray:
    out = np.empty(len(items), dtype=object)
    out[:] = [s.encode() if isinstance(s, str) else s for s in items]
    return out


def error(e: tf.errors.OpError) -> dict[str, str]:
    message = e.message.split("\n\t [[")[0]  # a session's: the node follows
    message = re.sub(r"^Graph execution error:.*\nNode: '[^']*'\n", "", message, flags=re.S)  # its traceback
    message = re.sub(r"^\{\{function_node [^}]*\}\} ", "", message)  # eager's: the function precedes
    return {"type": type(e).__name__, "message": re.sub(r" \[Op:\w+\]( name: .*)?$", "", message)}


# --- regexes ---------------------------------------------------------------------------------------------

TEXTS = strings(
    "hello world",
    "École été STRASSE ß",
    "a.b aab aaab",
    "日本 42 ½ ٣",
    "line1\nline2",
    "",
    "Hello, World! (it's 3:00 p.m.) [ok] {x} a_b-c",
    b"caf\xc3\xa9 \xff\xfe x",
    "tab\there  two  spaces",
    "Ωμέγα ΣΣ ǅ 😀👍",
)
PATTERNS = [
    r"\p{L}",
    r"\pL+",
    r"\p{Han}",
    r"\PL",
    r"[[:punct:]]",
    r"[[:alpha:]]+",
    r"[^[:ascii:]]",
    r"[[:^alpha:]]",
    r"[[:space:][:digit:]]",
    r"\w+",
    r"\W",
    r"\d",
    r"\s+",
    r"\b",
    r"\B",
    r"(?i)stra",
    r"(?i)é",
    r"(?i)σ",  # noqa: RUF001
    r"(?P<w>\w+)",
    r"\Qa.b\E",
    r"\x{e9}",
    r"\x41|\x{1F600}",
    r"\z",
    r"\A\w",
    r"(?s).",
    r".",
    r"a{2,}?",
    r"[\p{Lu}]",
    r"\C",
    r"(?U)a+",
    r"^",
    r"$",
    r"x*",
    r"",
    r"a|",
    r"\pN",
    r"\p{Greek}+",
    r"\pP",
    r"\p{Sc}|\p{So}",
    r"[\x{4e00}-\x{9fff}]",
    r"(?m)^\w",
    r"(?m)$",
    r"[^a-z ]+",
    r"(a)(b)?",
    # Keras' TextVectorization default standardization
    r'[!"#$%&()\*\+,-\./:;<=>?@\[\\\]^_`{|}~\']',
]
REWRITES = ["", "<\\0>", "[\\1|\\2]", "\\\\", "x\\qy", "x\\", "\\9", "a\\\\1", "\\0\\0"]
BAD_PATTERNS = [
    "(unclosed",
    "a**",
    "(?<n>a)",
    "(?<=a)b",
    "(?=a)",
    "(a)\\1",
    "\\8",
    "a{1001}",
    "[z-a]",
    "\\Z",
    "(?P=n)",
    "x{2}{3}",
    "\\p{Nope}",
    "[[:nope:]]",
]


def run_graph(build: Any, feeds: dict[str, Any]) -> tuple[Any, tf.Graph]:
    """Builds ``build(placeholders)`` in a v1 graph and runs it: (outputs as numpy | error dict, graph)."""
    g = tf.Graph()
    with g.as_default():
        placeholders = {
            k: tf1.placeholder(
                tf.string if np.asarray(v).dtype.kind in "OS" else tf.as_dtype(np.asarray(v).dtype), name=k
            )
            for k, v in feeds.items()
        }
        outputs = build(placeholders)
    with tf1.Session(graph=g) as sess:
        try:
            got = sess.run(outputs, {placeholders[k]: v for k, v in feeds.items()})
        except tf.errors.OpError as e:
            return error(e), g
        except ValueError:
            pass  # the session read a pattern such as [[:nope:]] in its message as a node's name
        else:
            return got, g
    try:  # the same ops run eagerly give the error
        build({k: tf.constant(v) for k, v in feeds.items()})
    except tf.errors.OpError as e:
        return error(e), g
    raise AssertionError("the graph failed, the same ops run eagerly did not")


def regex_cases() -> dict[str, Any]:
    cases: list[dict[str, Any]] = []

    def add(op: str, pattern: str | bytes, rewrite: str | None = None, replace_global: bool = True) -> None:
        p = pattern.encode() if isinstance(pattern, str) else pattern
        r = rewrite.encode() if rewrite is not None else None

        def build(ph: dict[str, Any]) -> Any:
            x = ph["x"]
            if op == "StaticRegexReplace":
                return tf.raw_ops.StaticRegexReplace(
                    input=x, pattern=p, rewrite=r, replace_global=replace_global
                )
            if op == "RegexReplace":
                return tf.raw_ops.RegexReplace(
                    input=x, pattern=tf.constant(p), rewrite=tf.constant(r), replace_global=replace_global
                )
            if op == "StaticRegexFullMatch":
                return tf.raw_ops.StaticRegexFullMatch(input=x, pattern=p)
            return tf.raw_ops.RegexFullMatch(input=x, pattern=tf.constant(p))

        got, _ = run_graph(build, {"x": TEXTS})
        case: dict[str, Any] = {"op": op, "pattern": text(p)}
        if r is not None:
            case |= {"rewrite": text(r), "replace_global": replace_global}
        case |= {"error": got} if isinstance(got, dict) else {"output": tensor(got)["data"]}
        cases.append(case)

    for pattern in PATTERNS:
        add("StaticRegexReplace", pattern, "<\\0>")
        add("RegexReplace", pattern, "<\\0>", replace_global=False)
        add("StaticRegexFullMatch", pattern)
        add("RegexFullMatch", ".*(?:" + pattern + ").*" if pattern else "")
    for rewrite in REWRITES:
        for replace_global in (True, False):
            add("StaticRegexReplace", "(a)(b)?", rewrite, replace_global)
    for pattern in BAD_PATTERNS:
        add("StaticRegexReplace", pattern, "x")
        add("RegexReplace", pattern, "x")
        add("StaticRegexFullMatch", pattern)
        add("RegexFullMatch", pattern)
    return {"texts": tensor(TEXTS)["data"], "cases": cases}


# --- one op per case, as NodeDefs -------------------------------------------------------------------------


class Cases:
    def __init__(self) -> None:
        self.cases: list[dict[str, Any]] = []

    def add(self, name: str, op: str, inputs: dict[str, Any], **attrs: Any) -> None:
        """``tf.raw_ops.<op>(**inputs, **attrs)`` on placeholders in0, in1, ... (in ``inputs`` order)."""
        feeds = {f"in{i}": v for i, v in enumerate(inputs.values())}
        names = list(inputs)

        def build(ph: dict[str, Any]) -> Any:
            args = {names[i]: ph[f"in{i}"] for i in range(len(names))}
            out = getattr(tf.raw_ops, op)(**args, **attrs, name="op")
            return list(out) if isinstance(out, (tuple, list)) else [out]

        got, g = run_graph(build, feeds)
        node = next(n for n in g.as_graph_def().node if n.name == "op")
        case: dict[str, Any] = {
            "name": name,
            "node": text_format.MessageToString(node, as_one_line=True),
            "inputs": [tensor(v) for v in feeds.values()],
        }
        case |= {"error": got} if isinstance(got, dict) else {"outputs": [tensor(v) for v in got]}
        self.cases.append(case)


I64, I32 = np.int64, np.int32


def ngram_cases(c: Cases) -> None:
    abcde = strings("a", "b", "c", "d", "e")

    def ng(name: str, data: Any, splits: Any, widths: list[int], **kw: Any) -> None:
        attrs = {
            "separator": " ",
            "left_pad": "",
            "right_pad": "",
            "pad_width": 0,
            "preserve_short_sequences": False,
        }
        c.add(
            f"ngrams {name}",
            "StringNGrams",
            {"data": data, "data_splits": splits},
            **(attrs | kw),
            ngram_widths=widths,
        )

    ng("bigrams", abcde, np.array([0, 3, 5], I64), [2])
    ng("widths 1-3", abcde, np.array([0, 3, 5], I64), [1, 2, 3])
    ng(
        "padded -1",
        abcde,
        np.array([0, 3, 5], I64),
        [2, 3],
        separator="|",
        left_pad="<",
        right_pad=">",
        pad_width=-1,
    )
    ng(
        "padded 1",
        abcde,
        np.array([0, 3, 5], I64),
        [3],
        separator="|",
        left_pad="<",
        right_pad=">",
        pad_width=1,
    )
    ng(
        "pad wider than width",
        strings("a", "b"),
        np.array([0, 2], I64),
        [3],
        separator="|",
        left_pad="<",
        right_pad=">",
        pad_width=5,
    )
    ng(
        "pad 3 width 2",
        strings("a", "b", "c"),
        np.array([0, 3], I64),
        [2],
        separator="|",
        left_pad="<",
        right_pad=">",
        pad_width=3,
    )
    ng(
        "only padding",
        strings("a"),
        np.array([0, 1], I64),
        [3],
        separator="|",
        left_pad="<",
        right_pad=">",
        pad_width=2,
    )
    ng(
        "empty row padded",
        strings("a"),
        np.array([0, 0, 1], I64),
        [3],
        separator="|",
        left_pad="<",
        right_pad=">",
        pad_width=2,
    )
    ng("preserve short", abcde, np.array([0, 3, 5, 5], I64), [4], preserve_short_sequences=True)
    ng(
        "preserve short padded",
        strings("a"),
        np.array([0, 1], I64),
        [4],
        separator="|",
        left_pad="L",
        right_pad="R",
        pad_width=1,
        preserve_short_sequences=True,
    )
    ng(
        "preserve short no widths",
        strings("a", "b"),
        np.array([0, 2], I64),
        [],
        pad_width=1,
        preserve_short_sequences=True,
    )
    ng(
        "preserve short no widths pad -1",
        strings("a", "b"),
        np.array([0, 2], I64),
        [],
        pad_width=-1,
        preserve_short_sequences=True,
    )
    ng("no widths", strings("a", "b"), np.array([0, 2], I64), [])
    ng("width 0", strings("a", "b"), np.array([0, 2], I64), [0])
    ng("no data", strings(), np.array([0], I64), [2])
    ng("no data no splits", strings(), np.zeros(0, I64), [2])
    ng("data no splits", strings("a", "b"), np.zeros(0, I64), [2])
    ng(
        "no data empty rows",
        strings(),
        np.array([0, 0, 0], I64),
        [2],
        left_pad="<",
        right_pad=">",
        pad_width=1,
    )
    ng("first split", strings("a", "b"), np.array([1, 2], I64), [2])
    ng("split past data", strings("a", "b"), np.array([0, 3], I64), [2])
    ng("decreasing split", strings("a", "b"), np.array([0, 2, 1], I64), [2])
    ng("last split", strings("a", "b"), np.array([0, 1], I64), [2])
    ng("2-D data", strings("a", "b", "c", "d").reshape(2, 2), np.array([0, 4], I64), [1, 3])
    ng("int32 splits", strings("a", "b", "c"), np.array([0, 3], I32), [2])
    ng(
        "utf-8 separator",
        strings("été", "日本", "x"),
        np.array([0, 3], I64),
        [2],
        separator="▁",
        left_pad="«",
        right_pad="»",
        pad_width=1,
    )


def split_cases(c: Cases) -> None:
    def ss(name: str, x: Any, delimiter: Any, skip_empty: bool = True) -> None:
        c.add(f"split {name}", "StringSplit", {"input": x, "delimiter": delimiter}, skip_empty=skip_empty)

    words = strings("a b  c", "", " x ", "a\tb")
    ss("space", words, np.array(b" ", dtype=object))
    ss("space keep empty", words, np.array(b" ", dtype=object), False)
    ss("delimiter set", strings("a,b;c", ",;", ";;x"), np.array(b",;", dtype=object))
    ss("delimiter set keep empty", strings("a,b;c", ",;", ";;x"), np.array(b",;", dtype=object), False)
    ss("bytes", strings("ab", "", "é"), np.array(b"", dtype=object))
    ss("bytes keep empty", strings("ab", "", "é"), np.array(b"", dtype=object), False)
    ss("all empty", strings("", ""), np.array(b" ", dtype=object), False)
    ss("no strings", strings(), np.array(b" ", dtype=object))
    ss("matrix", strings("a").reshape(1, 1), np.array(b" ", dtype=object))
    ss("vector delimiter", strings("a"), strings(" "))


MALFORMED = strings(
    "",
    "abc",
    "é日😀",
    b"\xff",
    b"a\xffb",
    b"\xe6\x97",
    b"a\xe6\x97",
    b"\xe6\x97a",
    b"\xc0\x80",
    b"\xed\xa0\x80",
    b"\xf4\x90\x80\x80",
    b"\xf0\x9f\x98",
    b"\x80\x80",
    b"\xf8\x88\x80\x80\x80",
    b"\x01\x1f \x7f",
    b"\xe0\x80\xaf",
    b"\xf0\x80\x80\x80z",
    b"a\xe6\x97 b\xc3",
)


def unicode_cases(c: Cases) -> None:
    def dec(name: str, x: Any, offsets: bool = True, **attrs: Any) -> None:
        op = "UnicodeDecodeWithOffsets" if offsets else "UnicodeDecode"
        c.add(f"{op} {name}", op, {"input": x}, **({"input_encoding": "UTF-8"} | attrs))

    for errors in ("replace", "ignore", "strict"):
        for offsets in (True, False):
            dec(f"malformed {errors}", MALFORMED, offsets, errors=errors)
            dec(
                f"controls {errors}",
                strings(b"a\x01b\x1f\x20", b"\x00"),
                offsets,
                errors=errors,
                replace_control_characters=True,
            )
        dec(f"valid {errors}", MALFORMED[:3], errors=errors)
    dec("replacement A", MALFORMED, errors="replace", replacement_char=0x41)
    dec("replacement 0", MALFORMED[3:6], errors="replace", replacement_char=0)
    dec("replacement out of range", MALFORMED[:2], errors="replace", replacement_char=0x110000)
    dec("matrix", strings("ab", "", "c", "é").reshape(2, 2))
    dec("int32 splits", MALFORMED[:5], False, Tsplits=tf.int32)  # with offsets TensorFlow aborts
    dec("no strings", strings())
    dec("scalar", np.array("é".encode(), dtype=object))
    utf16 = strings(
        "aé😀".encode("utf-16-be"),
        b"\xd8\x00\x00a",
        b"\xdc\x00",
        b"\x00a\x00",
        b"\xd8\x3d\xd8\x3d\xde\x00",
        b"\xd8\x3d",
    )
    for errors in ("replace", "ignore"):
        dec(f"UTF-16-BE {errors}", utf16, errors=errors, input_encoding="UTF-16-BE")
    dec("UTF-16-LE", strings("aé😀".encode("utf-16-le"), b"\x00\xd8a\x00", b"a"), input_encoding="UTF-16-LE")
    utf32 = strings(
        "a😀".encode("utf-32-be"),
        b"\x00\x11\x00\x00\x00\x00\x00a",
        b"\x00\x00\xd8\x00",
        b"\x00\x00\x00a\x00\x00",
    )
    dec("UTF-32-BE", utf32, input_encoding="UTF-32-BE")
    dec("UTF-32-BE ignore", utf32, input_encoding="UTF-32-BE", errors="ignore")
    dec("UTF-32-LE", strings("a😀".encode("utf-32-le")), input_encoding="UTF-32-LE")
    dec("ISO-8859-1", strings(b"\xe9t\xe9", b"\x00\xff"), input_encoding="ISO-8859-1")
    dec("US-ASCII", strings(b"ab\x80c"), input_encoding="US-ASCII")
    dec("utf8 alias", strings("é"), input_encoding="utf8")
    dec("unknown encoding", strings("é"), input_encoding="no-such-encoding")

    def enc(name: str, values: list[int], splits: list[int], splits_dtype: Any = I64, **attrs: Any) -> None:
        inputs = {"input_values": np.array(values, I32), "input_splits": np.array(splits, splits_dtype)}
        c.add(f"UnicodeEncode {name}", "UnicodeEncode", inputs, **({"output_encoding": "UTF-8"} | attrs))

    text_points = [104, 105, 233, 0x65E5, 0x1F600, 0]
    for encoding in ("UTF-8", "UTF-16-BE", "UTF-32-BE"):
        enc(encoding, text_points, [0, 2, 2, 6], output_encoding=encoding)
    bad = [104, -1, 0x110000, 0xD800, 0xDFFF, 105, 0xFFFE, 0x10FFFF]
    for errors in ("replace", "ignore", "strict"):
        enc(f"invalid {errors}", bad, [0, 3, 8], errors=errors)
    enc("replacement A", bad, [0, 8], replacement_char=0x41)
    enc("replacement surrogate", bad, [0, 8], replacement_char=0xD800)
    enc("replacement surrogate UTF-16-BE", bad, [0, 8], replacement_char=0xD800, output_encoding="UTF-16-BE")
    enc("replacement out of range", bad, [0, 8], replacement_char=-2)
    enc("pair of surrogates", [0xD83D, 0xDE00], [0, 2], output_encoding="UTF-16-BE")
    enc("int32 splits", [97, 98], [0, 1, 2], I32)
    enc("no values", [], [0, 0, 0])
    enc("no rows", [], [0])
    for name, splits in [
        ("no splits", []),
        ("first split", [1, 2]),
        ("last split", [0, 1]),
        ("split past values", [0, 3, 2]),
        ("decreasing split", [0, 2, 1, 3]),
    ]:
        enc(name, [97, 98] if name != "decreasing split" else [97, 98, 99], splits)
    c.add(
        "UnicodeEncode matrix",
        "UnicodeEncode",
        {"input_values": np.array([[97]], I32), "input_splits": np.array([0, 1], I64)},
        output_encoding="UTF-8",
    )
    points = [65, 0x4E00, 0x300, -1, 0x110000, 0xD800, 0x378, 0, 0x1F600, 0x10FFFF, 0x3A9, 0x627, 0x5D0]
    points += [0x2EBF0, 0x31EF, 0x2FFC, 0xE000, 0xFEFF, 0x1E900, 0x16A0, 0x0E01, 0x3042, 0x30A2, 0xAC00]
    c.add("UnicodeScript", "UnicodeScript", {"input": np.array(points, I32)})
    c.add("UnicodeScript matrix", "UnicodeScript", {"input": np.array([[97, 0x3B1], [0x430, -5]], I32)})


def bincount_cases(c: Cases) -> None:
    def rb(
        name: str,
        splits: list[int],
        values: list[int],
        size: int,
        weights: Any,
        binary: bool = False,
        values_dtype: Any = I32,
    ) -> None:
        inputs = {
            "splits": np.array(splits, I64),
            "values": np.array(values, values_dtype),
            "size": np.array(size, values_dtype),
            "weights": weights,
        }
        c.add(f"RaggedBincount {name}", "RaggedBincount", inputs, binary_output=binary)

    no_weights = np.zeros(0, np.float32)
    rb("counts", [0, 3, 4], [1, 2, 2, 4], 5, no_weights)
    rb("binary", [0, 3, 4], [1, 2, 2, 4], 5, no_weights, True)
    rb("weights", [0, 3, 4], [1, 2, 2, 4], 5, np.array([0.5, 1, 2, 3], np.float32))
    rb("binary weights", [0, 3, 4], [1, 2, 2, 4], 5, np.array([0.5, 1, 2, 3], np.float32), True)
    rb("int64 weights", [0, 3, 4], [1, 2, 2, 4], 5, np.array([1, 2, 3, 4], I64), values_dtype=I64)
    rb("float64 weights", [0, 3, 4], [1, 2, 2, 4], 5, np.array([1, 2, 3, 4], np.float64))
    rb("int32 counts", [0, 3, 4], [1, 2, 2, 4], 5, np.zeros(0, I32))
    rb("past size", [0, 3, 4], [1, 2, 2, 4], 2, no_weights)
    rb("size 0", [0, 3, 4], [1, 2, 2, 4], 0, no_weights)
    rb("empty rows", [0, 0, 2, 2], [1, 3], 4, no_weights)
    rb("no rows", [0], [], 3, no_weights)
    rb("splits not sorted", [0, 3, 2, 4], [1, 2, 2, 4], 5, no_weights)
    rb("negative value", [0, 3, 4], [1, -2, 2, 4], 5, no_weights)
    rb("negative size", [0, 3, 4], [1, 2, 2, 4], -1, no_weights)
    rb("first split", [1, 3, 4], [1, 2, 2, 4], 5, no_weights)
    rb("last split", [0, 3, 5], [1, 2, 2, 4], 5, no_weights)
    rb("no splits", [], [], 5, no_weights)
    rng = np.random.default_rng(7)
    many = rng.integers(0, 6, 400)
    rb("float32 sums", [0, 150, 400], many.tolist(), 6, rng.uniform(0, 1, 400).astype(np.float32))
    c.add(
        "RaggedBincount vector size",
        "RaggedBincount",
        {
            "splits": np.array([0, 1], I64),
            "values": np.array([1], I32),
            "size": np.array([3], I32),
            "weights": no_weights,
        },
    )

    def db(name: str, arr: Any, size: int, weights: Any, binary: bool = False) -> None:
        inputs = {"input": arr, "size": np.array(size, arr.dtype), "weights": weights}
        c.add(f"DenseBincount {name}", "DenseBincount", inputs, binary_output=binary)

    matrix = np.array([[1, 2], [2, 0]], I32)
    db("vector", np.array([1, 2, 2, 5], I32), 4, no_weights)
    db("matrix binary", matrix, 3, no_weights, True)
    db("matrix weights", matrix, 3, np.array([[1.0, 2.0], [3.0, 4.0]], np.float32))
    db("int64 input float64", np.array([1, 2, 2], I64), 4, np.zeros(0, np.float64))
    db("float32 sums", many.astype(I32), 6, rng.uniform(0, 1, 400).astype(np.float32))
    db("negative", np.array([1, -2], I32), 4, no_weights)
    db("rank 3", np.zeros((1, 1, 1), I32), 4, no_weights)
    db("weights shape", np.array([1, 2], I32), 4, np.array([1.0], np.float32))
    db("negative size", np.array([1, 2], I32), -1, no_weights)

    def bc(name: str, arr: Any, size: int, weights: Any) -> None:
        c.add(f"Bincount {name}", "Bincount", {"arr": arr, "size": np.array(size, I32), "weights": weights})

    bc("vector", np.array([1, 2, 2, 5], I32), 4, no_weights)
    bc("matrix", matrix, 3, no_weights)
    bc("weights", np.array([1, 2], I32), 3, np.array([0.5, 2.0], np.float32))
    bc("negative", np.array([1, -1], I32), 3, no_weights)
    bc("weights size", np.array([1, 2], I32), 3, np.array([1.0], np.float32))
    bc("negative size", np.array([1, 2], I32), -3, no_weights)


# --- Keras TextVectorization SavedModels -------------------------------------------------------------------

CORPUS = [
    "the cat sat on the mat",
    "the dog ate my homework",
    "a b c d e f g",
    "Hello, World! Ça va? naïve café",
    "the end. The END!",
]
FEED = strings(
    "The cat, the DOG!", "", b"caf\xc3\xa9 \xff na\xc3\xafve", "mat sat on", "a-b c_d e(f)", "Ça VA?"
)


def punctuation(x: Any) -> Any:
    return tf.strings.regex_replace(tf.strings.lower(x), "[[:punct:]]", "")


def vectorizers(layers: Any, names: tuple[str, ...] | None = None) -> dict[str, Any]:
    specs = {
        "int_default": {"max_tokens": 30, "output_sequence_length": 8},
        "int_punct": {"max_tokens": 30, "output_sequence_length": 6, "standardize": punctuation},
        "chars": {
            "max_tokens": 40,
            "output_sequence_length": 10,
            "split": "character",
            "standardize": "lower",
        },
        "multi_hot": {"max_tokens": 20, "output_mode": "multi_hot"},
        "count_bigrams": {"max_tokens": 30, "output_mode": "count", "ngrams": 2},
        "tf_idf": {"max_tokens": 20, "output_mode": "tf_idf"},
    }
    out = {}
    for name, kw in specs.items():
        if names is not None and name not in names:
            continue
        layer = layers.TextVectorization(**kw, name=name)
        layer.adapt(CORPUS)
        out[name] = layer
    return out


def keras3_model(path: Path) -> None:
    import keras

    inp = keras.Input((), dtype="string", name="text")
    layers = vectorizers(keras.layers)
    model = keras.Model(inp, {name: layer(inp) for name, layer in layers.items()})
    shutil.rmtree(path.parent, ignore_errors=True)
    model.export(str(path), verbose=False)


def tf_keras_model(path: Path) -> None:
    import tf_keras

    inp = tf_keras.Input((1,), dtype=tf.string, name="text")
    # the modes whose graphs tf_keras writes its own way (a [batch, 1] input squeezed; a SavedModel of
    # every layer's functions, so fewer layers keep it small)
    layers = vectorizers(tf_keras.layers, ("int_punct", "multi_hot", "count_bigrams"))
    model = tf_keras.Model(inp, {name: layer(inp) for name, layer in layers.items()})
    shutil.rmtree(path.parent, ignore_errors=True)
    model.save(str(path), save_format="tf")


def record_model(name: str, signature: str, feed: dict[str, Any]) -> None:
    path = FIXTURES / "saved_models" / name / "1"
    fn = tf.saved_model.load(str(path)).signatures[signature]
    out = fn(**{k: tf.constant(v) for k, v in feed.items()})
    record = {
        "signature": signature,
        "inputs": {k: tensor(v) for k, v in feed.items()},
        "outputs": {k: tensor(v.numpy()) for k, v in sorted(out.items())},
    }
    write_json(FIXTURES / "saved_models" / f"{name}.json", record)


def main() -> None:
    kernels = FIXTURES / "kernels"
    write_json(kernels / "regex_ops.json", regex_cases())
    c = Cases()
    ngram_cases(c)
    split_cases(c)
    unicode_cases(c)
    bincount_cases(c)
    write_json(kernels / "text_ops.json", {"cases": c.cases})
    keras3_model(FIXTURES / "saved_models" / "keras3_text" / "1")
    record_model("keras3_text", "serve", {"text": FEED})
    tf_keras_model(FIXTURES / "saved_models" / "tf_keras_text" / "1")
    record_model("tf_keras_text", "serving_default", {"text": FEED.reshape(-1, 1)})
    print(f"wrote {len(c.cases)} op cases, TensorFlow {tf.__version__}")


if __name__ == "__main__":
    main()
