"""DecodePaddedRaw (``tf.io.decode_raw`` with ``fixed_length``, runtime/kernels/parsing_ops.py) against what
TensorFlow 2.21 computed (tools/make_op_case_fixtures.py, group "padded_raw"): strings cut or padded with
zero bytes, both byte orders, a rank-2 input, and a length not a multiple of the type's size (refused)."""

from __future__ import annotations

import pytest
from support import OpCases

CASES = OpCases("padded_raw")


@pytest.mark.parametrize("case", CASES.names())
def test_matches_tensorflow(case: str) -> None:
    CASES.check(case, atol=0)


def test_fixture_covers_results_and_refusals() -> None:
    errors = {name for name, m in CASES.meta.items() if "error" in m}
    assert errors == {"not_multiple"}
