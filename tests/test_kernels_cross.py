"""SparseCross, SparseCrossHashed, SparseCrossV2 and Fingerprint (runtime/kernels/cross_ops.py) against what
TensorFlow 2.21 computed for the same inputs (tools/make_op_case_fixtures.py, group "cross"): string,
int64 and dense columns, rows without values, unsorted indices, hash keys, bucket counts, strong hashes,
and the inputs TensorFlow refuses."""

from __future__ import annotations

import numpy as np
import pytest
from support import OpCases

from poolserve.runtime.kernels.cross_ops import fingerprint64, fingerprint_cat64

CASES = OpCases("cross")


@pytest.mark.parametrize("case", CASES.names())
def test_matches_tensorflow(case: str) -> None:
    CASES.check(case)


def test_fixture_covers_each_op_and_its_refusals() -> None:
    ops = {m["op"] for m in CASES.meta.values()}
    assert ops == {"SparseCross", "SparseCrossHashed", "SparseCrossV2", "Fingerprint"}
    assert sum("error" in m for m in CASES.meta.values()) >= 6


def test_hashed_cross_is_the_fingerprint_chain_of_its_values() -> None:
    # tf.sparse.cross_hashed's documented example: FingerprintCat64 over Fingerprint64 of each value
    got, _, _ = CASES.run("hashed_dense_only_0_0")
    words = CASES.arrays["hashed_dense_only_0_0/in/" + CASES.meta["hashed_dense_only_0_0"]["feeds"][0]]
    ints = CASES.arrays["hashed_dense_only_0_0/in/" + CASES.meta["hashed_dense_only_0_0"]["feeds"][1]]
    first = fingerprint64([words[0, 0]])
    want = fingerprint_cat64(first, ints[0, 0:1].view(np.uint64)) % np.uint64(2**63 - 1)
    assert got[1][0] == int(want[0])
