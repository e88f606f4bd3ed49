"""SerializeTensor and ParseTensor (runtime/kernels/parsing_ops.py), for models that take or give a tensor as
a serialized TensorProto, against what TensorFlow 2.21 computed (tools/make_op_case_fixtures.py, group
"serialized_tensors"): the bytes TensorFlow writes for numbers of each width, booleans, complex, strings,
scalars and empty tensors, the tensors it reads back, and what it refuses (a wrong ``out_type``, bytes that
are no TensorProto, a vector of them)."""

from __future__ import annotations

import pytest
from support import OpCases

CASES = OpCases("serialized_tensors")


@pytest.mark.parametrize("case", CASES.names())
def test_matches_tensorflow(case: str) -> None:
    CASES.check(case)


def test_fixture_covers_results_and_refusals() -> None:
    errors = {name for name, m in CASES.meta.items() if "error" in m}
    assert errors == {"parse_wrong_type", "parse_garbage", "parse_vector"}
