"""UnicodeTranscode (runtime/kernels/unicode_ops.py), DecodeCompressed and DecodeJSONExample
(runtime/kernels/parsing_ops.py), what ``tf.strings.unicode_transcode``, ``tf.io.decode_compressed`` and
``tf.io.decode_json_example`` leave in a graph, against what TensorFlow 2.21 computed
(tools/make_op_case_fixtures.py, group "strings_extra"): every input and output encoding, malformed and
control characters under each errors policy, ZLIB and GZIP streams (cut short: what was decoded; not
ZLIB: TensorFlow's inflate error), and Examples in JSON, byte for byte as TensorFlow serializes them.

A JSON document TensorFlow refuses is refused with the same class and prefix; the reason after it is
protobuf's Python parser's, not TensorFlow's C++ one's."""

from __future__ import annotations

import re

import numpy as np
import pytest
from support import OpCases, run_op

from poolserve.runtime.errors import InvalidArgumentError, OpError, UnimplementedError

CASES = OpCases("strings_extra")
JSON_REFUSED = [c for c in CASES.names("DecodeJSONExample") if "error" in CASES.meta[c]]


@pytest.mark.parametrize("case", [c for c in CASES.names() if c not in JSON_REFUSED])
def test_matches_tensorflow(case: str) -> None:
    CASES.check(case)


@pytest.mark.parametrize("case", JSON_REFUSED)
def test_refuses_the_json_tensorflow_refuses(case: str) -> None:
    cls, _ = CASES.meta[case]["error"]
    with pytest.raises(OpError, match=re.escape("Error while parsing JSON: ")) as info:
        CASES.run(case)
    assert type(info.value).__name__ == cls


def test_fixture_covers_each_op_and_refusal() -> None:
    assert {m["op"] for m in CASES.meta.values()} == {
        "UnicodeTranscode",
        "DecodeCompressed",
        "DecodeJSONExample",
    }
    assert {"decompress_garbage", "decompress_lowercase", "transcode_strict_1"} <= {
        c for c, m in CASES.meta.items() if "error" in m
    }


def test_zstd_is_refused_clearly() -> None:
    with pytest.raises(UnimplementedError, match="not ZSTD"):
        run_op("DecodeCompressed", [np.array([b"x"], object)], {"compression_type": "ZSTD"})


def test_json_that_is_not_utf8_is_refused() -> None:
    with pytest.raises(InvalidArgumentError, match="Error while parsing JSON"):
        run_op("DecodeJSONExample", [np.array([b"\xff{}"], object)])
