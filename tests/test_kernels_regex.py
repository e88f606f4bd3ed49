"""Regex kernels on RE2. Expected values are TensorFlow 2.21's: tests/fixtures/kernels/regex_ops.json
(tools/make_text_fixtures.py) holds what TensorFlow answered for a sweep of RE2's syntax, rewrites and
refused patterns, by each of the four ops, on the same texts."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
from support import FIXTURES, run_op

from poolserve import GraphBuilder, Session
from poolserve.runtime import errors
from poolserve.runtime.kernels import regex_ops

REGEX = json.loads((FIXTURES / "kernels" / "regex_ops.json").read_text())


def as_bytes(items: list[str]) -> Any:
    out = np.empty(len(items), dtype=object)
    out[:] = [s.encode("utf-8", "surrogateescape") for s in items]
    return out


TEXTS = as_bytes(REGEX["texts"])


def run_case(case: dict[str, Any]) -> Any:
    op, pattern = case["op"], case["pattern"].encode("utf-8", "surrogateescape")
    if op == "StaticRegexReplace":
        attrs = {
            "pattern": pattern,
            "rewrite": case["rewrite"].encode(),
            "replace_global": case["replace_global"],
        }
        return run_op(op, [TEXTS], attrs)
    if op == "StaticRegexFullMatch":
        return run_op(op, [TEXTS], {"pattern": pattern})
    inputs = [TEXTS, np.array(pattern, dtype=object)]
    if op == "RegexReplace":
        inputs.append(np.array(case["rewrite"].encode(), dtype=object))
        return run_op(op, inputs, {"replace_global": case["replace_global"]})
    return run_op(op, inputs)


@pytest.mark.parametrize(
    "case",
    [pytest.param(c, id=f"{c['op']} {c['pattern']!r} {c.get('rewrite', '')!r}") for c in REGEX["cases"]],
)
def test_regex_ops_answer_as_tensorflow(case: dict[str, Any]):
    if "error" in case:
        with pytest.raises(getattr(errors, case["error"]["type"])) as caught:
            run_case(case)
        assert case["error"]["message"] in str(caught.value)
        return
    got = run_case(case)
    want = as_bytes(case["output"]) if case["op"].endswith("Replace") else np.array(case["output"], bool)
    assert got.dtype == want.dtype
    assert got.tolist() == want.tolist()


def test_posix_and_unicode_classes_are_re2s():
    """What Python's re got wrong silently: [[:punct:]] is ASCII punctuation, not a nested set."""
    x = as_bytes(["Hello, world!", "Good movie.", "bad-movie", "naïve «café»"])
    out = run_op("StaticRegexReplace", [x], {"pattern": "[[:punct:]]", "rewrite": "", "replace_global": True})
    assert out.tolist() == [b"Hello world", b"Good movie", b"badmovie", "naïve «café»".encode()]
    letters = run_op("StaticRegexReplace", [x], {"pattern": r"\pL+", "rewrite": "w", "replace_global": True})
    assert letters.tolist() == [b"w, w!", b"w w.", b"w-w", "w «w»".encode()]


def test_a_bad_static_pattern_fails_the_run_that_needs_it_not_the_graph():
    """TensorFlow builds a kernel when a run first needs it: a graph whose other fetches do not need the
    node still runs them."""
    b = GraphBuilder()
    x = b.placeholder("x", object, [None])
    b.op(
        "StaticRegexReplace", [x], {"pattern": "(unclosed", "rewrite": "", "replace_global": True}, name="bad"
    )
    b.identity(x, name="fine")
    with Session(b.graph_def) as s:
        assert s.run("fine:0", {"x:0": as_bytes(["a"])}).tolist() == [b"a"]
        with pytest.raises(
            errors.InvalidArgumentError, match=r"Invalid pattern: \(unclosed, error: missing \): \(unclosed"
        ):
            s.run("bad:0", {"x:0": as_bytes(["a"])})


def test_a_pattern_that_is_not_utf8_is_refused_with_re2s_message():
    with pytest.raises(errors.InvalidArgumentError, match="Invalid pattern: .*, error: invalid UTF-8"):
        run_op("RegexFullMatch", [TEXTS, np.array(b"\xff", dtype=object)])


def test_dynamic_patterns_must_be_scalars():
    two = as_bytes(["a", "b"])
    with pytest.raises(errors.InvalidArgumentError, match=r"Pattern must be scalar, but received \[2\]"):
        run_op("RegexFullMatch", [TEXTS, two])
    with pytest.raises(errors.InvalidArgumentError, match=r"Rewrite must be scalar, but received \[2\]"):
        run_op("RegexReplace", [TEXTS, np.array(b"a", dtype=object), two], {"replace_global": True})


def test_a_dynamic_pattern_is_compiled_again_only_when_it_changes(monkeypatch: pytest.MonkeyPatch):
    compiled: list[bytes] = []
    compile_pattern = regex_ops.compile_pattern

    def counting(pattern: bytes) -> Any:
        compiled.append(pattern)
        return compile_pattern(pattern)

    monkeypatch.setattr(regex_ops, "compile_pattern", counting)
    b = GraphBuilder()
    x = b.placeholder("x", object, [None])
    p = b.placeholder("p", object, [])
    b.op("RegexFullMatch", [x, p], name="m")
    words = as_bytes(["ab", "b"])
    with Session(b.graph_def) as s:

        def run(pattern: bytes) -> list[bool]:
            return s.run("m:0", {"x:0": words, "p:0": np.array(pattern, dtype=object)}).tolist()

        assert run(b"a.") == [True, False]
        assert run(b"a.") == [True, False]
        assert run(b"b") == [False, True]
        for _ in range(2):  # a refused pattern is remembered too
            with pytest.raises(errors.InvalidArgumentError, match="missing"):
                run(b"(")
        assert run(b"b") == [False, True]
    assert compiled == [b"a.", b"b", b"(", b"b"]
