"""DecodeCSV (runtime/kernels/parsing_ops.py) against what TensorFlow 2.21 computed for the same inputs
(tools/make_op_case_fixtures.py, group "csv"): every output type, quoted fields with delimiters and doubled
quotes, defaults for empty and ``na_value`` fields, ``select_cols``, other delimiters, records of rank 0 and
2, and the records TensorFlow refuses (a required field missing, a wrong field count, a bad number, a stray
quote)."""

from __future__ import annotations

import pytest
from support import OpCases

CASES = OpCases("csv")


@pytest.mark.parametrize("case", CASES.names())
def test_matches_tensorflow(case: str) -> None:
    CASES.check(case)


def test_fixture_covers_results_and_refusals() -> None:
    errors = {name for name, m in CASES.meta.items() if "error" in m}
    assert {"types", "matrix", "select_cols", "na_value"}.isdisjoint(errors)
    assert {"required", "too_few", "bad_int", "quote_then_text"} <= errors
