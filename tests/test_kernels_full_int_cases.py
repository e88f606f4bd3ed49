"""StatelessRandomUniformFullInt and its V2 form (runtime/kernels/random_ops.py), which
``tf.random.experimental.stateless_split``, ``stateless_fold_in`` and an integer ``stateless_uniform``
without bounds draw, against what TensorFlow 2.21 computed (tools/make_op_case_fixtures.py, group
"full_int"): every integer dtype (64-bit values from pairs of Philox words, the first the low half), shapes of
rank 1, 2 and none, seeds and key/counter pairs."""

from __future__ import annotations

import pytest
from support import OpCases

CASES = OpCases("full_int")


@pytest.mark.parametrize("case", CASES.names())
def test_matches_tensorflow(case: str) -> None:
    CASES.check(case)


def test_fixture_covers_each_dtype() -> None:
    assert {n.split("_", 1)[1].rsplit("_", 1)[0] for n in CASES.names() if n != "bad_seed"} == {
        "int32",
        "int64",
        "uint32",
        "uint64",
    }
