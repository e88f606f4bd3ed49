"""String kernels. Expected values are TensorFlow 2.21's (tf.strings on the same inputs);
tools/op_fuzz_strings.py compares the kernels with TensorFlow on random cases."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from support import run_op

from poolserve.runtime.errors import InvalidArgumentError

WORDS = ["", "cat", "The Cat sat, on the DOG!", "héllo wörld"]


def strings(*words: str) -> Any:
    out = np.empty(len(words), dtype=object)
    out[:] = [w.encode() for w in words]
    return out


def as_text(x: Any) -> list[str]:
    return [s.decode() for s in x.tolist()]


def test_hash_buckets_are_tensorflows_fingerprints():
    out = run_op("StringToHashBucketFast", [strings(*WORDS)], {"num_buckets": 1000})
    assert out.dtype == np.int64
    np.testing.assert_array_equal(out, [263, 96, 417, 627])
    with pytest.raises(InvalidArgumentError, match="num_buckets"):
        run_op("StringToHashBucketFast", [strings("a")], {"num_buckets": 0})


def test_case_and_length_take_bytes_or_utf8():
    x = strings(*WORDS)
    assert as_text(run_op("StringLower", [x], {"encoding": ""})) == [
        "",
        "cat",
        "the cat sat, on the dog!",
        "héllo wörld",
    ]
    assert as_text(run_op("StringUpper", [strings("héllo")], {"encoding": "utf-8"})) == ["HÉLLO"]
    assert as_text(run_op("StringUpper", [strings("héllo")], {"encoding": ""})) == ["HéLLO"]
    np.testing.assert_array_equal(run_op("StringLength", [x], {"unit": "BYTE"}), [0, 3, 24, 13])
    np.testing.assert_array_equal(run_op("StringLength", [x], {"unit": "UTF8_CHAR"}), [0, 3, 24, 11])
    assert as_text(run_op("StringStrip", [strings("\t a b \n")])) == ["a b"]


def test_regexes_match_utf8_text_with_re2_rewrites():
    x = strings(*WORDS)
    out = run_op("StaticRegexReplace", [x], {"pattern": r"[^\w\s]", "rewrite": "", "replace_global": True})
    assert as_text(out) == ["", "cat", "The Cat sat on the DOG", "hllo wrld"]
    once = run_op(
        "StaticRegexReplace",
        [strings("cat at")],
        {"pattern": "(a)(t)", "rewrite": r"\2\1|\0", "replace_global": False},
    )
    assert as_text(once) == ["cta|at at"]
    # a rewrite naming a group the pattern lacks leaves the strings as they are
    same = run_op(
        "StaticRegexReplace", [strings("cat at")], {"pattern": "a", "rewrite": r"\2", "replace_global": True}
    )
    assert as_text(same) == ["cat at"]
    full = run_op("StaticRegexFullMatch", [x], {"pattern": ".*[Cc]at.*"})
    np.testing.assert_array_equal(full, [False, True, True, False])
    with pytest.raises(InvalidArgumentError, match="invalid pattern"):
        run_op("StaticRegexFullMatch", [x], {"pattern": "(unclosed"})


def test_join_broadcasts_scalars_and_as_string_formats_like_printf():
    joined = run_op(
        "StringJoin", [strings("a", "b"), np.array(b"x", dtype=object)], {"separator": "-", "N": 2}
    )
    assert as_text(joined) == ["a-x", "b-x"]
    f = np.array([1.5, -2.25], np.float32)
    assert as_text(run_op("AsString", [f])) == ["1.500000", "-2.250000"]
    assert as_text(run_op("AsString", [f[:1]], {"shortest": True})) == ["1.5"]
    assert as_text(run_op("AsString", [np.array([0.000123])], {"scientific": True, "precision": 2})) == [
        "1.23e-04"
    ]
    assert as_text(run_op("AsString", [np.array([3], np.int64)], {"width": 4, "fill": "0"})) == ["0003"]
    assert as_text(run_op("AsString", [np.array([True])])) == ["true"]


def test_split_on_a_separator_or_on_whitespace_as_tensorflow_does():
    x = strings("a b  c", "", " x y ", "a,,b", "  ")

    def split(sep: str, maxsplit: int) -> tuple[list[list[int]], list[str], list[int]]:
        indices, values, shape = run_op(
            "StringSplitV2", [x, np.array(sep.encode(), dtype=object)], {"maxsplit": maxsplit}, num_outputs=3
        )
        return indices.tolist(), as_text(values), shape.tolist()

    assert split("", -1) == (
        [[0, 0], [0, 1], [0, 2], [2, 0], [2, 1], [3, 0]],
        ["a", "b", "c", "x", "y", "a,,b"],
        [5, 3],
    )
    # past maxsplit the rest is one more token, even an empty one
    assert split("", 1)[1] == ["a", "b  c", "x", "y ", "a,,b", ""]
    assert split(",", -1)[1] == ["a b  c", "", " x y ", "a", "", "b", "  "]
    assert split(",", 0)[1] == ["a b  c", "", " x y ", "a,,b", "  "]
