"""Unicode kernels. Expected values are TensorFlow 2.21's: the cases of tests/fixtures/kernels/text_ops.json
(tools/make_text_fixtures.py) run TensorFlow's own NodeDefs on malformed UTF-8 under each ``errors`` mode,
UTF-16/32 and Latin-1 input, invalid code points, bad splits, and scripts."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from support import check_node_case, node_cases, run_op

from poolserve.runtime.errors import InvalidArgumentError


@pytest.mark.parametrize(
    "case", node_cases("UnicodeDecode", "UnicodeDecodeWithOffsets", "UnicodeEncode", "UnicodeScript")
)
def test_unicode_ops_answer_as_tensorflow(case: dict[str, Any]):
    check_node_case(case)


def strings(*items: bytes) -> Any:
    out = np.empty(len(items), dtype=object)
    out[:] = list(items)
    return out


def decode(x: Any, **attrs: Any) -> list[Any]:
    attrs = {"input_encoding": "UTF-8", "errors": "replace", "replace_control_characters": False} | attrs
    return run_op("UnicodeDecodeWithOffsets", [x], attrs, num_outputs=3)


def test_valid_utf8_decodes_as_malformed_text_does_character_by_character():
    """Valid strings take Python's codec in one pass; a malformed one among them sends the whole batch
    through the byte scanner. Both must give the same characters and offsets."""
    rng = np.random.default_rng(5)
    alphabet = ["a", " ", "é", "ß", "日", "本", "😀", "\u0300", "\x7f", "\U0010ffff"]
    valid = [("".join(rng.choice(alphabet, size=int(rng.integers(0, 9))))).encode() for _ in range(40)]
    fast = decode(strings(*valid))
    slow = decode(strings(*valid, b"\xff"))
    for f, s in zip(fast, slow, strict=True):
        np.testing.assert_array_equal(f, s[: len(f)])
    assert fast[0][-1] == sum(len(v.decode()) for v in valid)
    assert slow[1][-1] == 0xFFFD


def test_an_encoding_poolserve_cannot_decode_is_named_when_the_graph_loads():
    with pytest.raises(
        InvalidArgumentError, match="Could not create converter for input encoding: windows-1252"
    ):
        decode(strings(b"\x80"), input_encoding="windows-1252")


def test_unicode_script_is_icus_for_every_code_point_the_table_covers():
    points = np.array([0x41, 0x10FFFF, 0x110000, -(2**31), 0x2EBF0], np.int32)
    np.testing.assert_array_equal(run_op("UnicodeScript", [points]), [25, 103, -1, -1, 103])
