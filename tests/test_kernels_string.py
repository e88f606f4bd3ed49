"""String kernels. Expected values are TensorFlow 2.21's (tf.strings on the same inputs; for StringNGrams
and StringSplit the cases of tests/fixtures/kernels/text_ops.json, tools/make_text_fixtures.py);
tools/op_fuzz_strings.py compares the kernels with TensorFlow on random cases. Regexes:
test_kernels_regex.py."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from support import check_node_case, node_cases, run_op

from poolserve.runtime.errors import InvalidArgumentError, OutOfRangeError

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


def test_base64_is_web_safe_with_optional_padding():
    encoded = run_op("EncodeBase64", [strings("", "a", "ab", "abc")], {"pad": False})
    assert as_text(encoded) == ["", "YQ", "YWI", "YWJj"]
    padded = run_op("EncodeBase64", [np.array([b"a", b"\xff\xfe\xfd\xfc"], dtype=object)], {"pad": True})
    assert as_text(padded) == ["YQ==", "__79_A=="]
    decoded = run_op("DecodeBase64", [strings("aGVsbG8", "aGVsbG8=", "YR==", "abc", "")])
    assert decoded.tolist() == [b"hello", b"hello", b"a", b"i\xb7", b""]
    with pytest.raises(InvalidArgumentError, match="Invalid character found in base64"):
        run_op("DecodeBase64", [strings("aGVsbG8==")])
    with pytest.raises(InvalidArgumentError, match="Invalid character found in base64"):
        run_op("DecodeBase64", [strings("+/")])
    with pytest.raises(InvalidArgumentError, match="Base64 string length cannot be 1 modulo 4"):
        run_op("DecodeBase64", [strings("abcde")])


def test_substr_counts_bytes_or_utf8_characters_and_broadcasts():
    x = strings("hello", "héllo")
    pos, length = np.array([1, -4], np.int32), np.array([2, 2], np.int32)
    assert run_op("Substr", [x, pos, length], {"unit": "BYTE"}).tolist() == [b"el", b"\xa9l"]
    assert as_text(run_op("Substr", [x, pos, length], {"unit": "UTF8_CHAR"})) == ["el", "él"]
    # a negative length runs to the end (bytes) or takes nothing (UTF-8 characters)
    assert as_text(run_op("Substr", [x, np.int64(-3), np.int64(-2)], {"unit": "BYTE"})) == ["llo", "llo"]
    assert as_text(run_op("Substr", [x, np.int64(0), np.int64(-2)], {"unit": "UTF8_CHAR"})) == ["", ""]
    grid = run_op(
        "Substr", [strings("abc", "defg"), np.array([[0], [1]], np.int32), np.array([[1], [2]], np.int32)]
    )
    assert grid.tolist() == [[b"a", b"d"], [b"bc", b"ef"]]
    with pytest.raises(
        InvalidArgumentError, match=r"pos -5 out of range for string b'abc' at index \(1, 0\)"
    ):
        run_op(
            "Substr",
            [strings("abc", "defg"), np.array([[0], [-5]], np.int32), np.array([[1], [2]], np.int32)],
        )
    with pytest.raises(InvalidArgumentError, match="pos 6 out of range for string at index 1"):
        run_op("Substr", [x, np.array([1, 6], np.int32), length], {"unit": "UTF8_CHAR"})
    with pytest.raises(InvalidArgumentError, match="pos and len should have the same shape"):
        run_op("Substr", [x, pos, np.int32(1)])


def test_reduce_join_joins_the_first_listed_axis_fastest():
    x = strings("a", "b", "c", "d", "e", "f").reshape(2, 3)

    def join(axes: list[int], **attrs: Any) -> Any:
        return run_op("ReduceJoin", [x, np.array(axes, np.int32)], {"separator": "|", **attrs})

    assert join([0]).tolist() == [b"a|d", b"b|e", b"c|f"]
    assert join([-1], keep_dims=True).tolist() == [[b"a|b|c"], [b"d|e|f"]]
    assert join([0, 1]).item() == b"a|d|b|e|c|f"
    assert join([1, 0]).item() == b"a|b|c|d|e|f"
    assert join([]).tolist() == x.tolist()
    with pytest.raises(OutOfRangeError, match="Invalid reduction dimension 2 for input with 2 dimension"):
        join([2])
    with pytest.raises(InvalidArgumentError, match="Duplicate reduction dimension 0"):
        join([0, -2])


def test_string_format_summarizes_like_tf_print():
    floats = np.array([[1.5, 1 / 3], [1e10, np.nan]], np.float32)
    texts = np.array([b"a'b", "é\t".encode()], dtype=object)
    out = run_op(
        "StringFormat",
        [floats, texts, np.bool_(True)],
        {
            "template": "x={} s={} b={}",
            "placeholder": "{}",
            "summarize": 1,
            "T": [np.float32, np.dtype(object), np.bool_],
        },
    )
    assert out.item() == b'x=[[1.5 0.333333343]\n [1e+10 nan]] s=["a\\\'b" "\xc3\xa9\\t"] b=1'
    ints = run_op("StringFormat", [np.arange(10)], {"template": "%s", "summarize": 2, "T": [np.int64]})
    assert ints.item() == b"[0 1 ... 8 9]"
    with pytest.raises(
        InvalidArgumentError, match="num placeholders in template and num inputs must match: 2 vs. 1"
    ):
        run_op("StringFormat", [np.int32(5)], {"template": "%s %s", "T": [np.int32]})


def test_string_to_number_parses_as_tensorflow():
    assert run_op("StringToNumber", [strings(" 12", "-7", "+3")], {"out_type": np.int32}).tolist() == [
        12,
        -7,
        3,
    ]
    floats = run_op("StringToNumber", [strings("1.5", "0x1p3", "-inf", "1e40")], {"out_type": np.float32})
    assert floats.dtype == np.float32
    np.testing.assert_array_equal(floats, [1.5, 8.0, -np.inf, np.inf])
    for text, out_type in [
        ("2147483648", np.int32),
        ("-1", np.uint32),
        ("1_0", np.float64),
        ("1.5", np.int64),
    ]:
        with pytest.raises(
            InvalidArgumentError, match=f"StringToNumberOp could not correctly convert string: {text}"
        ):
            run_op("StringToNumber", [strings(text)], {"out_type": out_type})


def test_keyed_and_legacy_hash_buckets():
    x = strings(*WORDS)
    strong = run_op("StringToHashBucketStrong", [x], {"num_buckets": 1000, "key": [1, -2]})
    np.testing.assert_array_equal(strong, [606, 374, 603, 50])  # SipHash-2-4
    legacy = run_op("StringToHashBucket", [x], {"num_buckets": 1000})
    np.testing.assert_array_equal(legacy, [899, 335, 349, 426])  # TensorFlow's Hash64
    wide = run_op(
        "StringToHashBucketStrong",
        [strings("", "a", "hello world", "abcdefghijk")],
        {"num_buckets": 2**62, "key": [1, 2]},
    )
    np.testing.assert_array_equal(
        wide, [443797209252341627, 546566331822570742, 1015233985318741638, 3995744027899252462]
    )
    with pytest.raises(InvalidArgumentError, match="Key must have 2 elements"):
        run_op("StringToHashBucketStrong", [x], {"num_buckets": 10, "key": [1]})


@pytest.mark.parametrize("case", node_cases("StringNGrams", "StringSplit"))
def test_ngrams_and_v1_split_answer_as_tensorflow(case: dict[str, Any]):
    check_node_case(case)
